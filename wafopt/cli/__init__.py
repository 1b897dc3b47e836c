"""The `wafopt` command line: one small class per subcommand (wafopt.cli.app), each parsing its
arguments, calling one wafopt.api function and printing what it returns through wafopt.present.

Exit codes: 0 ok, 1 internal error, 2 invalid input, 3 infeasible, 4 not certified, 130 interrupted.
The `wafopt` executable starts in wafopt.launch, which loads this package.
"""

from wafopt.cli.app import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
