"""The exit codes of every command (:data:`EXIT_CODES`, :data:`COMMON_EXIT_CODES`) and the
``fedaudit --help`` table made from them.
"""

from __future__ import annotations






#: what exit codes 0 and 1 mean, per command: ``(commands, 0, 1)``. 2, 130, 141 and 143 mean the same
#: for every command (:data:`COMMON_EXIT_CODES`). The ``--help`` epilog and docs/running.md show
#: this table; tests/cli/test_exitcodes.py checks each row.
EXIT_CODES: tuple[tuple[str, str, str], ...] = (
    ("run, demo", "every claim met its expectation", "some claim did not (FAIL or INCONCLUSIVE)"),
    # every command generated from a claim kind (fedaudit.cli.kinds): "audit …" is one per kind
    ("audit …, check, stress",
     "the claim's verdict is PASS (as in a plan)", "its verdict is FAIL or INCONCLUSIVE (e.g. a certified violation)"),
    ("verify", "intact and verified", "not intact; a verdict, the overall or the plan text contradicts the "
                                      "report's own records; made from another plan than --plan; stale bytecode "
                                      "ran; signed but checked without the key; unsigned with --require-signature; "
                                      "an Ed25519 signature that does not verify, binds other facts than the folder's "
                                      "or is not by --public-key/--signer"),
    ("sign", "signed (the report was intact and consistent)", "—"),
    ("diff", "no claim got worse beyond its noise (under --fail-on; default: no privacy claim)",
     "a claim got worse beyond its noise: a verdict (PASS → INCONCLUSIVE or FAIL), a certified bound, an "
     "accountant ε or ν̂, a self-test (passed → failed); or a deployment fact weakened the guarantee (a smaller "
     "privacy unit, more trust, pure → approximate DP, …) or a privacy hazard newly appeared (under --fail-on "
     "any, also a removed claim)"),
    ("keygen, export-registry, mechanisms, list, plans, aggregators, sparse, audit scores, account …", "done", "—"),
)

#: exit codes with one meaning for every command
COMMON_EXIT_CODES: tuple[tuple[int, str], ...] = (
    (2, "bad input: one line on stderr naming the parameter, path or component, nothing has run "
        "(verify: the path, --plan or --public-key is unreadable or not a report folder or key; FEDAUDIT_REPORT_KEY "
        "set but empty; diff: OLD or NEW unreadable or not intact); "
        "also a file that cannot be written (a full disk), named in one line"),
    (130, "interrupted (Ctrl-C): one line on stderr; finished claims/cells are kept (rerun with --resume)"),
    (141, "stdout's reader went away (output piped into head): the output stops there, nothing on stderr; "
          "not a failed claim (128 + SIGPIPE, as a shell reports it)"),
    (143, "terminated (SIGTERM), handled as Ctrl-C: one line on stderr, checkpoints kept, lock released"),
)


def exit_code_table() -> str:
    """:data:`EXIT_CODES` and :data:`COMMON_EXIT_CODES` as the plain-text table of ``--help``."""
    lines = ["exit codes:"]
    for commands, zero, one in EXIT_CODES:
        lines += [f"  {commands}", f"      0  {zero}"] + ([f"      1  {one}"] if one != "—" else [])
    lines.append("  every command")
    lines += [f"    {code:>3}  {meaning}" for code, meaning in COMMON_EXIT_CODES]
    return "\n".join(lines)
