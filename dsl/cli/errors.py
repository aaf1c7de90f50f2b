"""The one exception every subcommand raises for a mistake the user can fix.

It lives apart from main.py so command modules can raise it without importing the
parser assembly that imports them."""


class UserError(Exception):
    """A problem the user can fix (bad argument, missing file, ...); printed without a traceback."""
