"""The text of the bundled sample corpus, per agent (see :mod:`engram_pipeline.sample` for how it is laid out
in time and written to ``data/sample_corpus.jsonl``)."""

from typing import Any

# Per agent: the user-profile claims (old value first where the fact changes), trigger-action episodes as
# (text, outcome), near-duplicate groups, stale notes, short-term notes, pinned rules, and a demo query.
AGENTS: dict[str, dict[str, Any]] = {
    "coding-assistant": {
        # Session notes that restate a claim: consolidation distils their majority into a belief.
        "notes": [
            "Reviewed the PR together; user prefers black for formatting.",
            "Formatted the new module on request; the user prefers black for formatting.",
            "Paired on the parser; user prefers black for formatting.",
        ],
        "profile": [
            ["User's editor is Neovim.", "The user's editor is Neovim", "My editor is Neovim."],
            ["User lives in Berlin.", "The user lives in Berlin", "I live in Berlin."],
            ["User lives in Munich.", "The user now lives in Munich."],
            ["User works at Acme Corp.", "The user works at Acme Corp", "User works for Acme Corp."],
            ["User prefers Python.", "The user prefers Python", "User's language is Python."],
        ],
        "episodes": [
            ("When the build fails with a lockfile error, run npm ci.", "success"),
            (
                "Build failed with a lockfile error; ran npm ci and the build passed.",
                "success",
                {"trigger": "the build fails with a lockfile error", "action": "run npm ci"},
            ),
            (
                "The build broke on a lockfile mismatch, npm ci fixed it.",
                "success",
                {"trigger": "the build fails with a lockfile error", "action": "run npm ci"},
            ),
            ("When the build failed with a lockfile error, running npm install did not fix it.", "failure"),
            ("When CI fails on a lockfile error, run npm ci to reinstall from the lockfile.", "success"),
            ("When tests time out in CI, rerun them with --runInBand.", "success"),
            (
                "Tests timed out in CI; rerunning with --runInBand made them pass.",
                "success",
                {"trigger": "tests time out in CI", "action": "rerun them with --runInBand"},
            ),
            ("When tests time out in CI, raising the timeout alone did not help.", "failure"),
            ("When mypy reports missing stubs, install the types- package.", "success"),
            ("mypy complained about missing stubs; installing types-requests fixed it.", "success"),
            ("When the Docker build runs out of disk, run docker system prune.", "success"),
            ("Docker build ran out of disk space; docker system prune freed enough.", "success"),
        ],
        "near_duplicates": [
            [
                "User prefers dark mode in the editor.",
                "The user prefers dark mode in their editor.",
                "User likes dark mode in the editor.",
            ],
            [
                "The project uses pytest for tests.",
                "Tests in the project are written with pytest.",
                "The project's test runner is pytest.",
            ],
            ["User wants short commit messages.", "User prefers short commit messages."],
        ],
        "stale": [
            "User once asked about Perl regex lookbehind syntax.",
            "User tried the Atom editor in 2021.",
            "A colleague mentioned a Rust rewrite of the parser.",
            "User looked at the jQuery migration guide once.",
            "User asked how to center a div.",
            "User wondered about switching the blog to Jekyll.",
            "A flaky test in the legacy billing module was skipped once.",
        ],
        "stm": [
            "User is debugging the payment service today.",
            "Currently fixing the login redirect bug.",
            "The team sync is at 3pm today.",
        ],
        "pinned": ["Never push directly to the main branch.", "Never print API tokens in logs."],
        "query": "how do I fix a lockfile error in the build?",
    },
    "travel-assistant": {
        # Session notes that restate a claim: consolidation distils their majority into a belief.
        "notes": [
            "Booked the Porto flight; user prefers aisle seats.",
            "Changed the Madrid booking; the user prefers aisle seats.",
            "Picked seats for the Rome trip; user prefers window seats.",
        ],
        "profile": [
            ["User lives in Lisbon.", "The user lives in Lisbon", "I live in Lisbon."],
            ["User lives in Porto.", "The user now lives in Porto."],
            ["User works at Globex.", "The user works at Globex", "I work at Globex."],
            ["User prefers window seats.", "The user prefers window seats", "User prefers a window seat."],
            ["User's language is Portuguese.", "The user's language is Portuguese", "My language is Portuguese."],
            ["User's editor is Google Docs.", "The user's editor is Google Docs", "My editor is Google Docs."],
        ],
        "episodes": [
            ("When a flight is delayed more than 3 hours, file an EU261 compensation claim.", "success"),
            (
                "Flight delayed 4 hours; filed an EU261 claim and got 400 euros.",
                "success",
                {"trigger": "a flight is delayed more than 3 hours", "action": "file an EU261 compensation claim"},
            ),
            ("When the flight was delayed over 3 hours, the EU261 claim was rejected for weather.", "failure"),
            ("When a hotel is overbooked, ask for a room at a partner hotel.", "success"),
            (
                "Hotel was overbooked; asking for a partner hotel got a free upgrade.",
                "success",
                {"trigger": "a hotel is overbooked", "action": "ask for a room at a partner hotel"},
            ),
            ("When booking German trains, buy the Sparpreis fare early.", "success"),
            ("Bought the Sparpreis fare three weeks early and saved 60 percent.", "success"),
            ("When a connection is under 45 minutes, book a later flight.", "success"),
            ("A 40 minute connection in Frankfurt was missed.", "failure"),
        ],
        "near_duplicates": [
            ["User is vegetarian.", "The user is vegetarian", "User eats a vegetarian diet."],
            ["User's home airport is LIS.", "The user's home airport is Lisbon LIS."],
            ["User avoids red-eye flights.", "User does not like red-eye flights."],
        ],
        "stale": [
            "User asked about ski passes in Andorra in 2022.",
            "User considered a cruise to Norway.",
            "User looked at hostels in Prague.",
            "User asked about visa rules for Brazil once.",
            "User browsed camper van rentals in Iceland.",
            "User asked about the lounge at the old terminal.",
        ],
        "stm": ["User is flying to Madrid tomorrow.", "Check-in for the Rome flight opens tonight."],
        "pinned": ["User's passport expires in March 2027."],
        "query": "my flight was delayed, what should I do?",
    },
    "support-bot": {
        # Session notes that restate a claim: consolidation distils their majority into a belief.
        "notes": [
            "Answered a billing question; customer prefers email support.",
            "Closed the export ticket; the customer prefers email support.",
            "Followed up on the refund; customer prefers email support.",
        ],
        "profile": [
            ["Customer's plan is Pro.", "The customer's plan is Pro", "The customer is on the Pro plan."],
            ["Customer's plan is Enterprise.", "The customer's plan is Enterprise."],
            ["Customer uses the Android app.", "The customer uses the Android app", "Customer uses Android."],
            ["Customer works at Initech.", "The customer works at Initech", "Customer works for Initech."],
            ["Customer's language is Spanish.", "The customer's language is Spanish", "Customer speaks Spanish."],
        ],
        "episodes": [
            ("When a customer reports a login loop, clear the session cookie.", "success"),
            (
                "Customer was stuck in a login loop; clearing the session cookie fixed it.",
                "success",
                {"trigger": "a customer reports a login loop", "action": "clear the session cookie"},
            ),
            (
                "Login loop reported again; clearing the session cookie resolved it.",
                "success",
                {"trigger": "a customer reports a login loop", "action": "clear the session cookie"},
            ),
            ("When a customer reported a login loop, resetting the password did not help.", "failure"),
            ("When a refund request is older than 30 days, escalate it to billing.", "success"),
            ("Refund request was 45 days old; escalating to billing got it approved.", "success"),
            ("When the CSV export times out, suggest filtering by date range.", "success"),
            (
                "CSV export timed out; filtering by date range made it finish.",
                "success",
                {"trigger": "the CSV export times out", "action": "suggest filtering by date range"},
            ),
            ("When the CSV export timed out, retrying without a filter failed again.", "failure"),
        ],
        "near_duplicates": [
            [
                "Password reset emails can take up to 10 minutes to arrive.",
                "Password reset emails may take up to 10 minutes.",
                "It can take up to ten minutes for a password reset email to arrive.",
            ],
            ["The mobile app supports offline mode.", "Offline mode is supported in the mobile app."],
            ["Invoices are sent on the first of the month.", "Invoices go out on the 1st of each month."],
        ],
        "stale": [
            "A customer asked about the discontinued fax integration.",
            "Someone asked whether the app runs on Windows Phone.",
            "A customer mentioned a typo on the old pricing page.",
            "A user asked about the 2022 holiday schedule.",
            "A customer asked about the retired desktop widget.",
            "Someone reported a broken link in an archived newsletter.",
        ],
        "stm": ["The status page shows an outage right now.", "Billing is temporarily unavailable this morning."],
        "pinned": ["Never share another customer's data.", "Always verify the account email before a reset."],
        "query": "customer keeps getting logged out in a loop",
    },
    "research-agent": {
        # Session notes that restate a claim: consolidation distils their majority into a belief.
        "notes": [
            "Summarised three papers; user prefers short summaries.",
            "Wrote the weekly digest; the user prefers short summaries.",
            "Drafted the related-work notes; user prefers detailed summaries.",
        ],
        "profile": [
            ["User works at EMBL.", "The user works at EMBL", "I work at EMBL."],
            ["User lives in Heidelberg.", "The user lives in Heidelberg", "I live in Heidelberg."],
            ["User's editor is RStudio.", "The user's editor is RStudio", "My editor is RStudio."],
            ["User prefers R.", "The user prefers R", "I prefer R."],
            ["User prefers Python.", "The user now prefers Python."],
        ],
        "episodes": [
            ("When a PubMed search returns too many results, add MeSH terms.", "success"),
            (
                "PubMed returned 12000 hits; adding MeSH terms cut it to 300.",
                "success",
                {"trigger": "a PubMed search returns too many results", "action": "add MeSH terms"},
            ),
            ("When the PubMed search was too broad, adding more keywords did not help.", "failure"),
            ("When a PDF will not parse, run it through GROBID.", "success"),
            (
                "A scanned PDF would not parse; GROBID extracted the references.",
                "success",
                {"trigger": "a PDF will not parse", "action": "run it through GROBID"},
            ),
            ("When a PDF would not parse, GROBID failed on the scanned images.", "failure"),
            ("When a dataset lacks a license, email the corresponding author.", "success"),
        ],
        "near_duplicates": [
            [
                "AlphaFold predictions are reliable for single-domain proteins.",
                "AlphaFold is reliable on single-domain proteins.",
                "For single-domain proteins AlphaFold predictions are reliable.",
            ],
            ["The lab meeting is on Thursdays.", "Lab meetings happen every Thursday."],
            ["The lab meeting is at 10am.", "The lab meeting is at 11am."],
        ],
        "stale": [
            "User skimmed a 2019 paper on protein folding games.",
            "User asked about a conference in 2021.",
            "A reviewer once suggested a different clustering method.",
            "User read a blog post about LaTeX templates.",
            "User browsed an old mailing list thread on BLAST settings.",
            "A seminar on graph databases was mentioned once.",
        ],
        "stm": ["Reading the CRISPR review paper this afternoon.", "The grant draft is due tomorrow."],
        "pinned": ["Always cite the primary source, not a review."],
        "query": "search returns too many papers",
    },
}
