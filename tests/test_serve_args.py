"""serve_args: one reader and writer of `vllm serve` command lines and `LLM(...)` calls (issues 14 and 17)."""

from __future__ import annotations

import ast
import json
import shlex

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnoser.analysis.pipeline import diagnose, diagnose_text
from diagnoser.vllm import releases, serve_args
from diagnoser.vllm.flags import load_flags

from .conftest import FIXTURES, ROOT

ARGS = "(APIServer pid=1) INFO 06-01 10:00:00 [utils.py:326] non-default args: {body}\n"
INIT = ("INFO 06-01 10:00:01 [core.py:69] Initializing a V1 LLM engine (v{version}) with config: "
        "model='org/model-8b', max_seq_len=131072, tensor_parallel_size=1\n")
KV_ERROR = ("ERROR 06-01 10:00:40 [core.py:700] ValueError: To serve at least one request with the models's max "
            "seq len (131072), (16.00 GiB KV cache is needed), which is larger than the available KV cache memory "
            "(4.62 GiB). Based on the available memory, the estimated maximum model length is 37840. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")


def kv_finding(body: str | None = None, version: str = "0.10.1", command: str | None = None):
    text = (ARGS.format(body=body) if body else "") + (command + "\n" if command else "")
    f = diagnose_text(text + INIT.format(version=version) + KV_ERROR).findings[0]
    assert f.rule.id == "kv-cache-too-small"
    return f


def llm_kwargs(py: str) -> dict:
    call = ast.parse(py, mode="eval").body
    assert isinstance(call, ast.Call) and call.func.id == "LLM" and not call.args
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


# -- the two bugs of issue 14 ------------------------------------------------------------------------------------

def test_a_short_flag_after_a_switch_keeps_its_value():
    f = kv_finding(command="$ vllm serve org/model-8b --enforce-eager -tp 2 --gpu-memory-utilization 0.9")
    assert "--enforce-eager --tensor-parallel-size 2" in f.command
    assert llm_kwargs(f.python)["tensor_parallel_size"] == 2
    assert serve_args.parse_text("vllm serve m --enforce-eager -tp 2").settings() == {
        "enforce_eager": True, "tensor_parallel_size": "2"}


def test_server_only_flags_stay_out_of_the_python_call():
    f = kv_finding("{'model': 'org/model-8b', 'disable_uvicorn_access_log': True, 'host': '0.0.0.0'}")
    assert "--disable-uvicorn-access-log" in f.command and "--host 0.0.0.0" in f.command
    assert set(llm_kwargs(f.python)) == {"model", "max_model_len"}


# -- issue 17: commands vLLM would run as meant ------------------------------------------------------------------

def test_a_list_renders_per_arity():
    f = kv_finding("{'model': 'org/model-8b', 'served_model_name': ['qwen7b', 'qwen']}")
    assert "--served-model-name qwen7b qwen " in f.command + " " and "[" not in f.command
    assert llm_kwargs(f.python)["served_model_name"] == ["qwen7b", "qwen"]


def test_lora_modules_render_as_name_equals_path():
    f = kv_finding("{'model': 'org/model-8b', 'enable_lora': True, 'lora_modules': [LoRAModulePath(name='sql', "
                   "path='/loras/sql', base_model_name=None), LoRAModulePath(name='chat', path='/loras/chat')]}")
    assert "--enable-lora --lora-modules sql=/loras/sql chat=/loras/chat" in f.command
    assert "--name" not in f.command and "--path" not in f.command
    assert "lora_modules" not in llm_kwargs(f.python)   # a server option


def test_json_configs_render_as_json_strings():
    f = kv_finding("{'model': 'org/model-8b', 'compilation_config': {'level': 3, 'cudagraph_capture_sizes': [1, 2]}, "
                   "'limit_mm_per_prompt': {'image': 4}}")
    words = shlex.split(f.command)
    assert json.loads(words[words.index("--compilation-config") + 1]) == {"level": 3, "cudagraph_capture_sizes": [1, 2]}
    assert json.loads(words[words.index("--limit-mm-per-prompt") + 1]) == {"image": 4}


def test_an_object_repr_is_left_out_with_a_note():
    f = kv_finding("{'model': 'org/model-8b', 'compilation_config': CompilationConfig(level=3)}")
    assert "--compilation-config" not in f.command
    assert any("--compilation-config" in n for n in f.command_notes)


def test_a_switch_turned_off_renders_its_negative_form():
    f = kv_finding("{'model': 'org/model-8b', 'enable_prefix_caching': False, 'enable_chunked_prefill': False}")
    assert "--no-enable-prefix-caching" in f.command and "--no-enable-chunked-prefill" in f.command
    kw = llm_kwargs(f.python)
    assert kw["enable_prefix_caching"] is False and kw["enable_chunked_prefill"] is False


def test_no_negative_form_before_the_release_that_has_it():
    flag = load_flags()["--enable-prefix-caching"]
    assert serve_args.negative_form(flag, "0.6.3") is None
    assert serve_args.negative_form(flag, "0.10.1") == "--no-enable-prefix-caching"


def test_the_api_key_is_kept_as_a_variable_never_the_value():
    f = kv_finding("{'model': 'org/model-8b', 'host': '0.0.0.0', 'api_key': 'sk-live-abcdef0123456789'}")
    assert '--api-key "$VLLM_API_KEY"' in f.command and "sk-live" not in f.command
    assert any("VLLM_API_KEY" in n for n in f.command_notes)
    assert "api_key" not in llm_kwargs(f.python)


def test_no_placeholder_model():
    f = diagnose_text(KV_ERROR).findings[0]
    assert f.command is None and f.python is None
    assert f.command_notes == [serve_args.NO_MODEL_NOTE]


def test_a_command_that_would_repeat_the_failing_one_is_not_shown():
    # no fix applies (the rule computes none without numbers): the suggestion would be the failing command
    f = diagnose_text(ARGS.format(body="{'model': 'org/model-8b', 'max_model_len': 4096}")
                      + "ERROR 06-01 10:00:40 [core.py:700] ValueError: No available memory for the cache blocks. "
                        "Try increasing `gpu_memory_utilization` when initializing the engine.\n").findings[0]
    assert f.rule.id == "no-cache-blocks"
    assert f.command is None
    assert f.command_notes == ["no command is suggested: the log does not print the numbers that size the flag's value (see above)"]


# -- round trip: parse(render(x)) == x ---------------------------------------------------------------------------

FLAGS = [f for f in load_flags().values() if f.name not in ("--model", "--api-key", "--help", "--version")]
word = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Cn", "Co", "Zl", "Zp", "Zs")), min_size=1,
               max_size=10).filter(lambda w: not w.startswith("-"))


@st.composite
def settings_sets(draw):
    out = {}
    for flag in draw(st.lists(st.sampled_from(FLAGS), max_size=8, unique_by=lambda f: f.name)):
        if not flag.value:
            out[flag.key] = draw(st.booleans()) if flag.negatable else True
        elif flag.item:
            out[flag.key] = draw(st.lists(st.builds("{}={}".format, word, word), min_size=1, max_size=3))
        elif flag.json:
            out[flag.key] = draw(st.dictionaries(word, st.integers(), min_size=1, max_size=3))
        elif flag.nargs == "+":
            out[flag.key] = draw(st.lists(word, min_size=1, max_size=3))
        else:
            out[flag.key] = draw(word)
    return out


@settings(max_examples=300, deadline=2000)
@given(settings_sets(), word)
def test_parse_of_render_is_identity(given_settings, model):
    rendered = serve_args.render_serve(model, given_settings)
    assert rendered.notes == []
    back = serve_args.parse_text(rendered.text)
    assert back.model == model and back.positionals == []
    want = {k: (json.dumps(v, separators=(", ", ": ")) if load_flags()[serve_args.flag_of(k)].json else v)
            for k, v in given_settings.items()}
    assert back.settings() == want


# -- acceptance: every run:/python: line the project shows parses back and names real flags ----------------------

def check_command(cmd: str, py: str | None, version: str | None) -> None:
    words = shlex.split(cmd.replace(serve_args.API_KEY_VALUE, "KEY"))
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    # a release before `vllm serve` (0.5.2) is launched through the API server module
    assert words[:2] == ["vllm", "serve"] or (
        words[:4] == list(serve_args.API_SERVER_MODULE) and not releases.has_vllm_serve(version)), cmd
    parsed = serve_args.parse(words)
    assert parsed.model and parsed.model != "MODEL" and parsed.positionals == [], cmd
    for item in parsed.items:
        assert item.flag is not None or serve_args.FLAG_GRAMMAR.match(item.spelled), (cmd, item.spelled)
        if item.flag is None:
            continue
        assert serve_args.in_release(item.flag, version), (cmd, item.flag.name, version)
        if item.flag.value:
            assert item.words, (cmd, item.flag.name)
            assert item.flag.nargs == "+" or len(item.words) == 1, (cmd, item.flag.name)
        else:
            assert item.words is None, (cmd, item.flag.name)
        if item.negated:
            assert serve_args.negative_form(item.flag, version), (cmd, item.spelled, version)
    if py is not None:
        kw = llm_kwargs(py)
        assert kw["model"] == parsed.model
        for key in kw:
            flag = load_flags().get(serve_args.flag_of(key))
            assert flag is None or not flag.server_only, (py, key)


CASES = yaml.safe_load((FIXTURES / "expected.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_every_fixture_command_parses_back(case):
    with open(FIXTURES / case["file"], "rb") as fh:
        report = diagnose(fh, case["file"])
    for f in report.findings:
        if f.command:
            check_command(f.command, f.python, report.context.version)


def _release_of(input_path: str) -> str | None:
    """The release the golden's input log names (its context is not part of a jsonl record)."""
    for base in (ROOT / "tests" / "data", FIXTURES):
        path = base / input_path if (base / input_path).exists() else base / input_path.rsplit("/", 1)[-1]
        if path.exists():
            with open(path, "rb") as fh:
                return diagnose(fh, input_path).context.version
    return None


def test_every_golden_command_parses_back():
    seen = 0
    for path in sorted((ROOT / "tests" / "golden").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("command"):
                check_command(record["command"], record.get("python"), _release_of(record["input"]["path"]))
                seen += 1
    assert seen >= 5


def test_advice_claims_only_what_the_log_says_about_the_gpu():
    unknown = kv_finding("{'model': 'org/model-8b'}")
    assert "on this GPU" not in unknown.advice and "does not give the GPU's size" in unknown.advice
    total = ("INFO 06-01 10:00:30 [worker.py:267] the current vLLM instance can use total_gpu_memory (22.05GiB) x "
             "gpu_memory_utilization (0.90) = 19.84GiB\n")
    known = diagnose_text(ARGS.format(body="{'model': 'org/model-8b'}") + INIT.format(version="0.10.1") + total
                          + KV_ERROR).findings[0]
    assert "not enough on its own" in known.advice and "22.05 GiB GPU" in known.advice


def test_a_serving_time_oom_is_a_memory_finding_with_a_changed_command():
    with open(FIXTURES / "serving-oom-sampler-v1-0.10.log", "rb") as fh:
        f = diagnose(fh, "serving-oom").findings[0]
    assert (f.rule.id, f.stage) == ("serving-oom", "serving")
    assert "--gpu-memory-utilization 0.93" in f.command and "--max-num-seqs 512" in f.command
    assert "0.97" not in f.command and "1024" not in f.command


@pytest.mark.parametrize("model", ["python", "vllm", "serve", "python3"])
def test_a_model_named_like_a_program_word_stays_the_model(model):
    """`vllm serve python` (a local folder called `python`): the program ends at `serve`."""
    back = serve_args.parse_text(serve_args.render_serve(model, {"max_model_len": 4096}).text)
    assert back.model == model and back.positionals == []
    assert back.settings() == {"max_model_len": "4096"}
