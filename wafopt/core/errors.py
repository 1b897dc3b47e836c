"""The one error type for bad input, and the CLI exit codes."""

import signal

from wafopt.core.limits import MAX_MESSAGE_CHARS

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INVALID = 2
EXIT_NO_PLAN = 3       # no feasible plan exists, or none was found within the budget
EXIT_INFEASIBLE = EXIT_NO_PLAN  # `evaluate`: the plan is infeasible
EXIT_NOT_CERTIFIED = 4   # certify: a bound or status is claimed (solver proof) but not independently certified
EXIT_CERTIFY_INVALID = 5  # certify: the solution is invalid (infeasible plan, forged objective or bound, NaN)
EXIT_INTERRUPTED = 130  # Ctrl-C: the best plan so far is still written
NOT_STARTED = "interrupted before solving began; nothing written"   # a Ctrl-C before any method ran
STARTUP_SIGINTS: list[int] = []   # Ctrl-Cs while the command line loads (see note_startup_sigint)


def note_startup_sigint(signum, frame):
    """SIGINT handler while the command line and its solver libraries load: remembered, then the
    usual KeyboardInterrupt, once (a second Ctrl-C must not interrupt the handling of the first).
    A C extension interrupted in its import may turn the interrupt into an ImportError or swallow
    it; the record lets the command line still stop and say it was a Ctrl-C."""
    STARTUP_SIGINTS.append(signum)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


class InstanceError(ValueError):
    """Bad input: the message names the field and the offending value.

    The CLI turns it into one line on stderr and exit code 2, never a traceback.
    """

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        self.reason = message   # without `where`, so a caller may name the field as its user knows it
        super().__init__(one_short_line(f"{where}: {message}" if where else message))


def one_short_line(text: str) -> str:
    """Untrusted text in a message: newlines escaped, cut at MAX_MESSAGE_CHARS."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 3] + "..."


class CertificateError(ValueError):
    """A bound's certificate does not prove it: `certify` reports the solution invalid."""


class PlanError(Exception):
    """Raised inside evaluators for a plan whose structure cannot be read; becomes a violation."""
