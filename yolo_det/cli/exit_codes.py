"""The exit codes every ``yolo-det`` command returns (one table, documented in docs/exit-codes.md).

0 success / identical / clean; 1 a finding (runs diverged, ops that would fail under strict on CUDA,
a difference beyond seed noise); 2 a usage error or a refusal (nothing changed); 3 not proven: the
evidence that decides the verdict was missing, so the command says what it compared and claims nothing more.
70 is none of these: yolo-det itself failed (an unexpected internal error, a bug to report), so nothing was concluded
and a script never reads a crash as a finding.
"""

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = 2
EXIT_NOT_PROVEN = 3
#: an unexpected internal error (a bug in yolo-det): sysexits' EX_SOFTWARE, never a verdict's code
EXIT_INTERNAL = 70

EPILOG = ("exit codes: 0 ok/identical/clean, 1 a finding, 2 usage error or refusal, "
          "3 not proven (what decides the verdict was not compared), 70 internal error (a bug in yolo-det)")
