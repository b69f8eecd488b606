"""The judge of one case, inside the pytest process: goldens (cache and service), the candidate's
call and the accuracy verdict (precision standard), the second correctness pass, the task-quality gate.

Never spawns a process itself: it talks to child processes through ``workers``.
May import: ``vocab``, ``taskformat``, ``workers``, ``outcome``, ``phases``, ``options``.
"""
