"""The one exception type for mistakes a user can make (bad spec, bad config, missing file).

The CLI turns a UserError into one line on stderr and exit code 2, never a traceback.
Everything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A problem the user can fix. ``str(err)`` is the whole message: it names the file and the key.

    ``problems`` holds one line per problem when several were found at once (validate reports them all).
    """

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = list(problems) if problems else [message]
        super().__init__(message)
