"""The grading service (``cannbench serve``): warm judges behind an HTTP JSON API, on Ray.

``server`` starts it: an embedded local Ray cluster (or ``--address`` to join one), one :mod:`judge` actor per
card or share of the cores, each holding a warm :class:`pytest_cannbench.core.Grader`; ``app`` is the FastAPI
front (OpenAPI at ``/openapi.json``), ``dispatch`` the bounded queue, deadlines and retries between them,
``intake`` what a request may hand in (inline files, an archive, a directory under ``--submissions-root``),
``catalog`` the served task tree and ``-k`` selections, ``answer`` the reply (scores, reward, failure codes and
hints, provenance), ``metrics`` the Prometheus text, ``client`` and ``reward_fn`` the Python client and the RL
frameworks' reward adapter (``docs/serve.md``).

Runs outside any pytest session. Third-party: ``fastapi``, ``pydantic``, ``starlette``, ``uvicorn``, ``ray``,
``prometheus_client``, ``httpx`` (the ``serve`` extra).

May import: core (the warm grader), options, outcome, report (scores, pass@k, the secret's commitment), taskformat,
kernelbench (to name a tree it cannot serve yet).
"""
