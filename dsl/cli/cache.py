"""``opdsl cache info | clear [--backend B]``: look at or empty the on-disk compile cache.

Clearing deletes only the folders opdsl itself made (backends/cache.py decides)."""
from __future__ import annotations

import sys
from typing import List

from dsl.cli.errors import UserError


def _cache_backends() -> List[str]:
    try:
        from backends import cache
    except ImportError:
        return []
    return list(cache.FOLDERS)


def register(sub) -> None:
    k = sub.add_parser("cache", help="inspect or clear the on-disk compile cache",
                       description="Show what the compile cache holds, or delete its entries (all, or one "
                                   "backend's). Only folders opdsl created are ever deleted.",
                       epilog="example: opdsl cache clear --backend numba")
    k.add_argument("action", choices=("info", "clear"))
    k.add_argument("--backend", choices=_cache_backends(), help="clear only this backend's entries")
    k.set_defaults(func=run)


def run(args) -> int:
    try:
        from backends import cache
    except ImportError as e:
        raise UserError(f"the compile cache is not available in this install ({e})") from None
    if args.action == "info":
        if args.backend:
            raise UserError(f"--backend {args.backend}: only `opdsl cache clear` takes a backend; "
                            "`opdsl cache info` shows every backend's entries")
        print(cache.format_info(cache.info()))
        return 0
    try:
        removed = cache.clear(args.backend)
    except cache.NotACache as e:
        raise UserError(str(e)) from None
    print(f"removed {removed['files']} file(s), {removed['bytes']} bytes from {cache.cache_root()}"
          + (f" ({args.backend})" if args.backend else ""))
    for folder in removed["skipped"]:
        print(f"left alone: {folder} (a symlink or not yours)", file=sys.stderr)
    return 0
