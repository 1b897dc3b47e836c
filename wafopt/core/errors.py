"""The one error type for bad input, and the CLI exit codes."""

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INVALID = 2
EXIT_NO_PLAN = 3       # no feasible plan exists, or none was found within the budget
EXIT_INFEASIBLE = EXIT_NO_PLAN  # `evaluate`: the plan is infeasible
EXIT_NOT_CERTIFIED = 4
EXIT_INTERRUPTED = 130  # Ctrl-C: the best plan so far is still written


class InstanceError(ValueError):
    """Bad input: the message names the field and the offending value.

    The CLI turns it into one line on stderr and exit code 2, never a traceback.
    """

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)
