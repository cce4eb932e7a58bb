"""Models by name or Hugging Face config.json: the bundled catalogue against the published
parameter counts, the config.json fields read, and the command line (``--model``, ``models``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from clirun import QUICKSTART, SMALL, tiersim

from tiersim.catalogue import lookup, models
from tiersim.commands.models import spec
from tiersim.config.document import load_document, load_scenario
from tiersim.config.hf_config import ModelTypeWarning, expand_model, model_fields
from tiersim.config.schema import build
from tiersim.errors import ConfigError
from tiersim.workload import ModelSpec, active_parameter_count, parameter_count

PUBLISHED = {
    # name: (published parameters, where that count is published)
    "meta-llama/Llama-3.1-8B": (8e9, "model card table, huggingface.co/meta-llama/Llama-3.1-8B: Params 8B"),
    "meta-llama/Llama-3.1-405B": (405e9, "model card table, huggingface.co/meta-llama/Llama-3.1-405B: Params 405B"),
    "meta-llama/Llama-3.2-1B": (1.23e9, "model card table, huggingface.co/meta-llama/Llama-3.2-1B: 1B (1.23B)"),
    "meta-llama/Llama-3.2-3B": (3.21e9, "model card table, huggingface.co/meta-llama/Llama-3.2-1B: 3B (3.21B)"),
    "mistralai/Mixtral-8x7B-v0.1": (46.7e9, "mistral.ai/news/mixtral-of-experts: 46.7B total parameters"),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": (141e9, "mistral.ai/news/mixtral-8x22b: 141B parameters"),
    "Qwen/Qwen2.5-7B": (7.61e9, "model card, huggingface.co/Qwen/Qwen2.5-7B: Number of Parameters: 7.61B"),
    "Qwen/Qwen2.5-14B": (14.7e9, "model card, huggingface.co/Qwen/Qwen2.5-14B: Number of Parameters: 14.7B"),
    "Qwen/Qwen2.5-72B": (72.7e9, "model card, huggingface.co/Qwen/Qwen2.5-72B: Number of Parameters: 72.7B"),
    "Qwen/Qwen3-8B": (8.2e9, "model card, huggingface.co/Qwen/Qwen3-8B: Number of Parameters: 8.2B"),
    "Qwen/Qwen3-32B": (32.8e9, "model card, huggingface.co/Qwen/Qwen3-32B: Number of Parameters: 32.8B"),
    "Qwen/Qwen3-30B-A3B": (30.5e9, "model card, huggingface.co/Qwen/Qwen3-30B-A3B: 30.5B in total"),
    "Qwen/Qwen3-235B-A22B": (235e9, "model card, huggingface.co/Qwen/Qwen3-235B-A22B: 235B in total"),
    "google/gemma-2-9b": (917_962_752 + 8_324_201_984, "Gemma 2 report (arXiv 2408.00118) Table 2"),
    "google/gemma-2-27b": (1_180_237_824 + 26_047_480_320, "Gemma 2 report (arXiv 2408.00118) Table 2"),
    "google/gemma-3-12b-it": (1_012e6 + 10_759e6, "Gemma 3 report Table 1, embedding + non-embedding (text)"),
    "google/gemma-3-27b-it": (1_416e6 + 25_600e6, "Gemma 3 report Table 1, embedding + non-embedding (text)"),
    "microsoft/Phi-3-medium-4k-instruct": (14e9, "model card, huggingface.co/microsoft/Phi-3-medium-4k-instruct: "
                                                 "a 14B parameters model"),
    "deepseek-ai/DeepSeek-V2": (236e9, "model card, huggingface.co/deepseek-ai/DeepSeek-V2: 236B total parameters"),
    "deepseek-ai/DeepSeek-V3": (671e9, "model card, huggingface.co/deepseek-ai/DeepSeek-V3: 671B total parameters"),
    "EleutherAI/gpt-neox-20b": (20_554_567_680, "model card table, huggingface.co/EleutherAI/gpt-neox-20b"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_catalogue_parameter_counts_are_within_half_a_percent_of_the_published(name: str) -> None:
    published, _where = PUBLISHED[name]
    entry = lookup(name)
    assert entry is not None
    assert parameter_count(spec(entry)) == pytest.approx(published, rel=0.005)


def test_mixtral_activates_its_published_share() -> None:
    entry = lookup("mistralai/Mixtral-8x7B-v0.1")
    assert entry is not None  # mistral.ai/news/mixtral-of-experts: "only uses 12.9B parameters per token"
    assert active_parameter_count(spec(entry)) == pytest.approx(12.9e9, rel=0.005)


def test_every_catalogue_model_is_a_valid_model_with_its_sources() -> None:
    entries = models()
    assert len(entries) >= 30
    for entry in entries:
        assert entry.source.startswith("https://huggingface.co/") and entry.source.endswith("/config.json")
        assert entry.read_from
        model = spec(entry)
        assert model.name == entry.name and parameter_count(model) > 1e9


def test_names_are_looked_up_case_insensitive_with_or_without_the_organisation() -> None:
    found = lookup("META-LLAMA/llama-3.1-70b")
    assert found is not None and found.name == "meta-llama/Llama-3.1-70B"
    assert lookup("llama-3.1-70b") == found
    assert lookup("no-such-model") is None


def test_an_unknown_model_type_is_read_as_llama_style_with_a_warning() -> None:
    with pytest.warns(ModelTypeWarning, match="model_type 'gpt2' is not one tiersim knows"):
        fields = model_fields({"model_type": "gpt2", "hidden_size": 64, "intermediate_size": 256,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}, "c.json")
    assert fields["activation"] == "swiglu"


def test_config_json_fields_map_to_the_model() -> None:
    neox = model_fields({"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 256,
                         "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}, "c.json")
    assert (neox["activation"], neox["norm"], neox["bias"], neox["tied_embeddings"]) == \
           ("gelu", "layernorm", True, False)
    falcon = model_fields({"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 4, "multi_query": True, "vocab_size": 100}, "c.json")
    assert (falcon["ffn"], falcon["kv_heads"], falcon["tied_embeddings"]) == (256, 1, True)
    qwen = model_fields({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
                         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                         "vocab_size": 100}, "c.json")
    assert qwen["qkv_bias"] and not qwen["bias"] and qwen["kv_heads"] == 2


def test_qkv_bias_and_head_dim_count_what_the_config_says() -> None:
    base = ModelSpec(layers=1, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=100)
    biased = ModelSpec(layers=1, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=100, qkv_bias=True)
    assert parameter_count(biased) - parameter_count(base) == 64 + 2 * 32  # q, k and v biases
    wide = ModelSpec(layers=1, hidden=64, heads=4, head_dim=32, ffn=128, vocab=100)
    assert parameter_count(wide) - parameter_count(ModelSpec(layers=1, hidden=64, heads=4, ffn=128, vocab=100)) \
        == 4 * 64 * (4 * 32 - 64)  # q, k, v and o at 4 x 32 wide instead of 64


def test_hf_config_file_gives_the_catalogue_model(tmp_path: Path) -> None:
    entry = lookup("Qwen/Qwen3-30B-A3B")
    assert entry is not None
    (tmp_path / "config.json").write_text(json.dumps(entry.config))
    fields = expand_model({"hf_config": "config.json", "layers": 4}, "s.yaml", tmp_path)
    named = expand_model("qwen/qwen3-30b-a3b", "s.yaml", tmp_path)
    assert isinstance(fields, dict) and isinstance(named, dict)
    assert {**named, "layers": 4, "name": "config.json"} == fields


def test_a_scenario_names_its_model_and_set_still_wins(tmp_path: Path) -> None:
    text = QUICKSTART.read_text().replace("model:\n  name: llama2-7b", "model: meta-llama/Llama-3.2-1B\nunused:")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("\n".join(line for line in text.splitlines() if not line.startswith(("unused", "  layers",
                        "  hidden", "  heads", "  kv_heads", "  ffn", "  vocab"))))
    (config,) = load_scenario(scenario, ["model.layers=2"], ["dram"])
    assert config.model.name == "meta-llama/Llama-3.2-1B" and config.model.layers == 2
    assert config.model.tied_embeddings and config.model.head_dim == 64
    assert load_document(scenario).get("model.hidden") == 2048


def test_other_names_of_expert_parallelism_point_to_its_field() -> None:
    with pytest.raises(ConfigError, match="training.expert_parallel_size: expert parallelism is training.expert_p"):
        load_scenario(QUICKSTART, ["training.expert_parallel_size=2"])
    with pytest.raises(ConfigError, match="model.expert_parallel: expert parallelism is training.expert_parallel"):
        load_scenario(QUICKSTART, ["model.expert_parallel=2"])
    with pytest.raises(ConfigError, match="ep_size: expert parallelism is a training setting"):
        model_fields({"model_type": "deepseek_v3", "hidden_size": 8, "intermediate_size": 8,
                      "num_hidden_layers": 1, "num_attention_heads": 1,
                      "vocab_size": 8, "n_routed_experts": 4, "num_experts_per_tok": 1, "ep_size": 2}, "c.json")


def test_moe_fields_must_fit_together() -> None:
    with pytest.raises(ConfigError, match="model.experts_per_token: must be 1 to experts"):
        build(ModelSpec, {"layers": 2, "hidden": 8, "heads": 1, "ffn": 8, "experts": 4, "experts_per_token": 5},
              "s.yaml", "model")
    with pytest.raises(ConfigError, match="model.shared_experts: is a mixture-of-experts field; set experts too"):
        build(ModelSpec, {"layers": 2, "hidden": 8, "heads": 1, "ffn": 8, "shared_experts": 1}, "s.yaml", "model")


def test_run_with_model_alone_answers_and_writes_nothing(tmp_path: Path) -> None:
    proc = tiersim("run", "--model", "meta-llama/Llama-3.1-8B", "--strategy", "dram", "--format", "json",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (result,) = json.loads(proc.stdout)["results"]
    assert result["fits"] and result["iteration_time_s"] > 0
    assert list(tmp_path.iterdir()) == []


def test_models_lists_and_shows() -> None:
    listed = tiersim("models", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    mixtral = next(r for r in rows if r["name"] == "mistralai/Mixtral-8x7B-v0.1")
    assert mixtral["experts"] == "2/8" and mixtral["params_b"] == pytest.approx(46.7, abs=0.05)
    shown = tiersim("models", "deepseek-ai/deepseek-v3", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["model"]["kv_lora_rank"] == 512


def _hub(folder: Path, module: str) -> dict[str, str]:
    """An environment whose ``huggingface_hub`` is the module text ``module``."""
    folder.mkdir()
    (folder / "huggingface_hub.py").write_text(module)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}


def _no_hub(folder: Path) -> dict[str, str]:
    """An environment in which ``import huggingface_hub`` fails, as when it is not installed."""
    return _hub(folder, "raise ImportError('not installed')\n")


def test_other_names_come_from_the_hub_when_it_answers(tmp_path: Path) -> None:
    entry = lookup("microsoft/phi-4")
    assert entry is not None
    config = tmp_path / "config.json"
    config.write_text(json.dumps(entry.config))
    online = _hub(tmp_path / "online", f"def hf_hub_download(repo_id, filename):\n    return {str(config)!r}\n")
    proc = tiersim("run", "--model", "someone/phi-4-copy", "--strategy", "dram", "--format", "json",
                   *[a for s in SMALL for a in ("--set", s)], env=online)
    assert proc.returncode == 0, proc.stderr
    offline = _hub(tmp_path / "offline", "def hf_hub_download(repo_id, filename):\n    raise OSError('offline')\n")
    proc = tiersim("run", "--model", "someone/phi-4-copy", env=offline)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "Hugging Face Hub did not give its config.json (OSError)" in proc.stderr and "hf_config" in proc.stderr


def test_the_guide_lists_every_catalogue_model() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "scenarios.md").read_text()
    assert [entry.name for entry in models() if f"`{entry.name}`" not in guide] == []


@pytest.mark.slow
def test_bad_names_and_configs_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"hidden_size": 64,')
    (tmp_path / "short.json").write_text('{"hidden_size": 64, "num_hidden_layers": 2}')
    (tmp_path / "deep.json").write_text("[" * 100_000)
    os.mkfifo(tmp_path / "pipe.json")
    env = _no_hub(tmp_path / "hub")
    cases = {
        ("run", "--model", "no-such/model"): "not in the bundled catalogue",
        ("run", str(QUICKSTART), "--model", str(tmp_path / "bad.json")): "malformed JSON",
        ("run", str(QUICKSTART), "--model", str(tmp_path / "short.json")): "intermediate_size: required field",
        ("run", str(QUICKSTART), "--model", str(tmp_path / "deep.json")): "deep",
        ("run", str(QUICKSTART), "--model", str(tmp_path / "pipe.json")): "not a regular file",
        ("plan", str(QUICKSTART), "--objective", "largest-model", "--model", "nope"): "hf_config",
        ("run", str(QUICKSTART), "--set", "model=nope", *[a for s in SMALL for a in ("--set", s)]): "tiersim models",
        ("models", "nope"): "not in the bundled catalogue",
        ("run",): "or --model NAME",
    }
    for args, text in cases.items():
        proc = tiersim(*args, env=env)
        assert proc.returncode == 2, (args, proc.stderr)
        assert text in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
