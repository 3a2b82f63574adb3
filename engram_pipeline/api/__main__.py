"""``python -m engram_pipeline.api [--host H] [--port N] | mcp --agent ID``: run a server from the environment.

A small entry of its own so tests and benchmarks can start a real server without the CLI.
"""

from __future__ import annotations

import argparse
import sys

from engram_pipeline.settings import API_HOST, API_PORT, Settings, SettingsError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engram_pipeline.api")
    parser.add_argument("--host", default=API_HOST)
    parser.add_argument("--port", type=int, default=API_PORT)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--access-interval-ms", type=float, default=1000.0, help="access bookkeeping flush (0: inline)")
    parser.add_argument("--mcp-agent", default=None, help="serve MCP over stdio for this agent instead of HTTP")
    parser.add_argument("--mcp-admin", action="store_true", help="the MCP server may apply reviewed merge plans")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        if args.mcp_agent:
            from engram_pipeline.api import run_mcp

            run_mcp(args.mcp_agent, settings, admin=args.mcp_admin)
        else:
            from engram_pipeline.api import serve

            serve(
                args.host,
                args.port,
                settings,
                log_level=args.log_level,
                access_interval_s=args.access_interval_ms / 1000,
            )
    except SettingsError as exc:
        print(f"engram: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
