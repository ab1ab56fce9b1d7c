"""The one base class of the errors a user can fix.

`UserError` is raised for a user's mistake: a bad argument, option, file or
checkpoint, named in the message together with what would fix it. The
`bin/` scripts print such an error as one `Error:` line; any other
exception is a bug in bilm or below it and keeps its traceback.
"""


class UserError(ValueError):
    """Input that bilm cannot use; the message names it and the fix.

    A `ValueError`, so callers that catch `ValueError` keep working.
    """
