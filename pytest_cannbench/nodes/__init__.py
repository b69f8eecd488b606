"""pytest nodes: an operator's ``cases.yaml`` becomes a File, each case an Item; operator sharding.

Owns the items' life cycle (setup, runtest, teardown) and what each case records on its stash.
May import: ``vocab``, ``taskformat``, ``outcome``, ``phases``, ``options``, ``state``; the judge and timing rooms
through ``state`` and at call time (they bring torch).
"""
