"""The judge of one case, inside the pytest process: goldens (cache and service), the candidate's
call and the accuracy verdict (precision standard), the second correctness pass, the timing of a case that passed
(``perf``: the protocol, on the measurement tools of ``timing``), the task-quality gate.

Never spawns a process itself: it talks to child processes through ``workers``.

May import: vocab, options, outcome, phases, scratch, cbuild (the comparison's C kernel), figures, taskformat,
kernelbench, timing, workers, submission (the built submission: its state, interfaces and KernelBench modules).
"""
