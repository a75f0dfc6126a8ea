"""The GPU measurement's kit at its small shape, on the CPU: benchmarks/gpu/shaped_models.py writes
a pair llama.cpp loads with the shapes asked for, whose draft the target accepts at about the set
rate (and retuning in place moves it); benchmarks/gpu/shaped_bench.py runs every program on it
and reports; benchmarks/gpu/pack.sh's trimmed sdist fits what a GPU machine is sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

import specllama
from conftest import LLAMA_CPP_BIN

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import shaped_models  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("shaped")
    return d, shaped_models.make_pair(d, "small", 0.6)


def per_token_acceptance(report) -> float:
    """The target's acceptance of single drafts (n_draft 1: accepted over drafted is alpha) at
    T = 0.8 with llama.cpp's default chain, where the text wanders over the whole table (a greedy
    text soon cycles through a few tokens)."""
    with specllama.SpeculativeDecoder(report["files"]["target"], report["files"]["draft"], n_ctx=1024) as dec:
        s = dec.generate("the quick brown fox", max_tokens=600, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                         seed=1, n_draft=1, adaptive=False, drafter="model", ignore_eos=True).stats
    return s.acceptance_rate


def test_files_have_the_shapes(pair):
    d, report = pair
    target, draft, n_vocab = shaped_models.SHAPES["small"]
    for role, shape in (("target", target), ("draft", draft)):
        reader = gguf.GGUFReader(report["files"][role])
        tensors = {t.name: [int(x) for x in t.shape] for t in reader.tensors}
        head = shape.n_embd // shape.n_head
        assert tensors["token_embd.weight"] == [shape.n_embd, n_vocab]
        assert tensors["blk.0.attn_k.weight"] == [shape.n_embd, head * shape.n_head_kv]
        assert tensors["blk.0.ffn_up.weight"] == [shape.n_embd, shape.n_ff]
        assert sum(name.endswith("attn_q.weight") for name in tensors) == shape.n_layer
        assert specllama.Model(report["files"][role]).n_vocab == n_vocab


def test_the_acceptance_knob_sets_acceptance(pair):
    d, report = pair
    low = per_token_acceptance(report)
    assert abs(low - report["calibrated"]["t0.8"]) < 0.1, (low, report["calibrated"])
    high_report = shaped_models.retune(d, 0.9)
    assert json.loads((d / "shaped.json").read_text())["acceptance_asked"] == 0.9
    high = per_token_acceptance(high_report)
    assert abs(high - high_report["calibrated"]["t0.8"]) < 0.1, (high, high_report["calibrated"])
    assert high > low + 0.15
    shaped_models.retune(d, 0.6)  # (as the fixture made it, for the other tests)


def test_a_quantized_pair_loads(tmp_path):
    report = shaped_models.make_pair(tmp_path, "small", 0.8, quant="q8_0")
    assert report["files"]["target"].endswith("target.q8_0.gguf") and not (tmp_path / "target.f16.gguf").exists()
    with specllama.SpeculativeDecoder(report["files"]["target"], report["files"]["draft"], n_ctx=256) as dec:
        assert len(dec.generate("the fox", max_tokens=8, temperature=0, ignore_eos=True).tokens) == 8
    with pytest.raises(ValueError, match="only an f16 pair"):
        shaped_models.retune(tmp_path, 0.6)


def test_a_pair_written_before_is_kept_or_retuned(tmp_path):
    """pair_for (what run.sh and the bench use): the pair already in the directory at the same
    acceptance is kept as it is, at another it is retuned in place (the draft untouched), and one of
    another shape or type is written anew."""
    first = shaped_models.pair_for(tmp_path, "small", 0.8)
    draft, target = (Path(first["files"][k]) for k in ("draft", "target"))
    stamps = draft.stat().st_mtime_ns, target.stat().st_mtime_ns
    assert shaped_models.pair_for(tmp_path, "small", 0.8) == first
    assert (draft.stat().st_mtime_ns, target.stat().st_mtime_ns) == stamps
    again = shaped_models.pair_for(tmp_path, "small", 0.6)
    assert again["acceptance_asked"] == 0.6 and again["tau"] != first["tau"]
    assert draft.stat().st_mtime_ns == stamps[0]  # (only the target's output matrix was rewritten)
    quantized = shaped_models.pair_for(tmp_path, "small", 0.6, quant="q8_0")
    assert quantized["type"] == "q8_0" and quantized["files"]["target"].endswith("target.q8_0.gguf")


@pytest.mark.parametrize("servers", ["auto", "per-round"])
def test_the_bench_runs_every_program(tmp_path, servers):
    out = tmp_path / "shaped.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "shaped_bench.py"), "--shape", "small",
                        "--models", str(tmp_path / "models"), "--acceptance", "0.6,0.9", "--bindir", str(LLAMA_CPP_BIN),
                        "-ngl", "0", "-n", "16", "--rounds", "2", "-t", "2", "--n-max", "4", "--out", str(out),
                        "--servers", servers,
                        "--variant", "settle_steps=0", "--run", "adaptive=0,n_draft=3", "--run",
                        "adaptive=0,n_draft=3,draft_ahead=4", "--run", "mode=dsi,sp=2,lookahead=3"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["acceptances"]) == {"0.6", "0.9"}
    for res in report["acceptances"].values():
        assert res["pair"]["llama_server"] == ("started for each round" if servers == "per-round"
                                               else "loaded through the rounds")  # (auto: no GPU here)
        if (LLAMA_CPP_BIN / "llama-server").exists():
            assert len(res["runs"]["T=0.8"]["llama-server n_max 4"]) == 2  # (a figure each round)
        # each --run on a decoder of its own: a fixed-length run's steps did not price another's rule
        assert len(res["runs"]["T=0.0"]["specllama, adaptive=0,n_draft=3"]) == 2
        for temp in ("T=0.0", "T=0.8"):
            s = res["summary"][temp]
            programs = set(s["tokens_per_second"])
            assert {"plain", "specllama", "specllama, settle_steps=0", "specllama, adaptive=0,n_draft=3",
                    "specllama, adaptive=0,n_draft=3,draft_ahead=4", "specllama, mode=dsi,sp=2,lookahead=3"} <= programs
            if (LLAMA_CPP_BIN / "llama-server").exists():
                assert "llama-server n_max 4" in programs
            if (LLAMA_CPP_BIN / "llama-speculative-simple").exists():  # (or its log lost its timings, and it says so)
                assert "llama-speculative-simple n_max 4" in programs or "run_speculative_simple" in r.stderr
            assert s["specllama_over_plain"] > 0
        assert res["runs"]["T=0.8"]["specllama"][0]["sampling"] == "host"  # (auto: on a CPU)
        fixed = res["runs"]["T=0.0"]["specllama, adaptive=0,n_draft=3"][0]["steps"]["pattern"]
        assert set(fixed[1:]) <= set("123") and "3" in fixed, fixed  # (a fixed length: every step after the first drafts)
        kept = res["runs"]["T=0.0"]["specllama, adaptive=0,n_draft=3"][0]["steps"]["kept"]
        assert len(kept) == len(fixed) and all(int(k) <= int(d) for d, k in zip(fixed[1:], kept[1:])), (fixed, kept)
        verified = res["runs"]["T=0.0"]["specllama, adaptive=0,n_draft=3"][0]["steps"]["verified"]
        assert verified and set(verified) <= {2, 3, 4} and 4 in verified, verified  # (exact on a CPU: drafts + 1)
        # each step's drafts, verified tokens and ms, in the pattern's order (what graph_sim.py --replay prices)
        steps = res["runs"]["T=0.0"]["specllama, adaptive=0,n_draft=3"][0]["steps"]
        assert [row[0] for row in steps["step_ms"]][1:] == [int(c) for c in fixed[1:]]
        assert all(row[1] == row[0] + 1 for row in steps["step_ms"][1:]), steps["step_ms"]
        total = sum(sum(row[2:]) for row in steps["step_ms"])
        assert total == pytest.approx(steps["step_ms_sum"], abs=0.002 * len(fixed))
    assert "acceptance 0.9 T=0.8" in r.stdout
    assert "specllama, settle_steps=0 steps: " in r.stderr
    # graph_sim.py --replay prices each speculative generation's recorded steps, kind by kind
    replayed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "graph_sim.py"), "--replay", str(out)],
                              capture_output=True, text=True, timeout=120)
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    rows = replayed.stdout.splitlines()[1:]
    assert any(row.startswith("0.6 T=0.0 specllama, adaptive=0,n_draft=3 1: ") and ", drafting " in row
               for row in rows), rows


def test_llama_server_is_started_for_each_round_where_the_gpu_cannot_hold_every_copy(tmp_path):
    """shaped_bench's --servers auto: llama-server stays loaded where the GPU holds the pair once for
    specllama, once per server and once for llama-speculative-simple; else it starts each round."""
    from types import SimpleNamespace

    from conftest import load_benchmark

    bench = load_benchmark("gpu/shaped_bench.py")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    with open(target, "wb") as f:
        f.truncate(29_500 * 2**20)  # (sparse: a 14B-shaped F16 target's size)
    with open(draft, "wb") as f:
        f.truncate(950 * 2**20)
    args = SimpleNamespace(servers="auto", ngl=-1, n_max=[4], gpu_mib=81_559)  # an H100 80GB
    assert not bench.servers_stay_loaded(args, str(target), str(draft))
    args.gpu_mib = 143_771  # an H200
    assert bench.servers_stay_loaded(args, str(target), str(draft))
    args.n_max = [4, 8, 16]  # (two more servers)
    assert not bench.servers_stay_loaded(args, str(target), str(draft))
    with open(target, "wb") as f:
        f.truncate(15_200 * 2**20)  # (a 7B-shaped target)
    args.gpu_mib = 81_559
    assert not bench.servers_stay_loaded(args, str(target), str(draft))
    args.n_max = [4, 8]
    assert bench.servers_stay_loaded(args, str(target), str(draft))
    args.gpu_mib = None  # no GPU
    args.n_max = [4, 8, 16, 32]
    assert bench.servers_stay_loaded(args, str(target), str(draft))
    args.servers = "per-round"
    assert not bench.servers_stay_loaded(args, str(target), str(draft))


@pytest.mark.parametrize("bench_args, error", [
    (["-n", "8"], "several acceptances need --type f16"),  # (a quantized pair takes one acceptance)
    (["--acceptance", "0.8", "--rnuds", "2"], "unrecognized arguments: --rnuds"),
    (["--acceptance", "80"], "each acceptance is in (0, 1)"),
    (["--acceptance", "0.8", "--run", "adaptive"], "KEY=VALUE"),
])
def test_run_sh_refuses_bad_bench_arguments_before_it_writes_the_pair(tmp_path, bench_args, error):
    """Writing the 7B-shaped pair takes minutes of a lent GPU's time: run.sh measure checks the
    bench's arguments first, and a mistake there costs nothing but the check."""
    env = dict(os.environ, OUT=str(tmp_path), SPECLLAMA_GPU_SHAPE="small", SPECLLAMA_GPU_TYPE="q8_0",
               SPECLLAMA_GPU_CUDA="0", SPECLLAMA_PYTHON=sys.executable)
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "measure", *bench_args],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert error in r.stderr
    assert not (tmp_path / "shaped_models.log").exists()  # (the pair's writer never ran)


def _run_sh_check(tmp_path, cuda: str, *pytest_args):
    env = dict(os.environ, OUT=str(tmp_path), SPECLLAMA_GPU_CUDA=cuda, SPECLLAMA_PYTHON=sys.executable)
    env.pop("SPECLLAMA_TEST_GPU", None)
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "check", *pytest_args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_run_sh_check_runs_the_device_sampling_tests(tmp_path):
    """run.sh check: the device sampling tests against the installed specllama (here on the CPU,
    SPECLLAMA_GPU_CUDA=0), pytest's arguments passed on and its log kept among the reports."""
    r = _run_sh_check(tmp_path, "0", "-k", "what_comes_back or fallback_is_the_host_path")
    log = (tmp_path / "check.log").read_text()
    assert r.returncode == 0, log[-3000:]
    assert "7 passed" in log and "failed" not in log
    r = _run_sh_check(tmp_path, "0", "-k", "not_a_test_of_that_name")  # (nothing collected: a failure)
    assert r.returncode != 0


def test_run_sh_check_on_a_gpu_build_needs_a_gpu(tmp_path):
    """On a GPU build the check puts the suite's models on the GPU (SPECLLAMA_TEST_GPU=1); where
    libllama sees none it stops at once instead of passing on the CPU."""
    r = _run_sh_check(tmp_path, "1", "-k", "what_comes_back")
    assert r.returncode != 0
    assert "SPECLLAMA_TEST_GPU=1, but the installed libllama sees no GPU" in r.stdout + r.stderr


def test_the_bench_checks_its_arguments():
    from conftest import load_benchmark

    bench = load_benchmark("gpu/shaped_bench.py")
    args = bench.parse_args(["--models", "m", "--acceptance", "0.8,0.6", "--n-max", "4,8", "-ngl", "all",
                             "--run", "adaptive=0,n_draft=4", "--variant", "probe_reads=false,draft_catch_up=batch",
                             "--check"])
    assert args.check and args.acceptances == [0.8, 0.6] and args.n_max == [4, 8] and args.ngl == -1
    assert args.runs == {"adaptive=0,n_draft=4": {"adaptive": 0, "n_draft": 4}}
    assert args.variants == {"probe_reads=false,draft_catch_up=batch": {"probe_reads": False,
                                                                        "draft_catch_up": "batch"}}
    for bad in (["--type", "q4_k_m"], ["--shape", "qwen3b"], ["--acceptance", "0"], ["--n-max", "four"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--models", "m", *bad])
    assert bench.parse_args(["--models", "m", "--type", "q4_k_m", "--acceptance", "0.8"]).acceptances == [0.8]


def test_the_step_patterns_mark_each_kind_of_step():
    """compare.step_summary's two patterns, one character a step and aligned: the model's drafts
    (P a probe, R one that began with a read, r a read that called its probe off), L where prompt
    lookup alone drafted, . a plain step and p one a pause sat out; and the drafts kept in each, .
    where nothing was drafted."""
    from types import SimpleNamespace

    from conftest import load_benchmark

    compare = load_benchmark("compare.py")

    def step(n_model=0, n_drafted=0, n_accepted=0, paused=False, probe=False, read=False):
        return SimpleNamespace(n_model=n_model, n_drafted=n_drafted, n_accepted=n_accepted, paused=paused,
                               probe=probe, read=read)

    steps = [step(), step(n_model=3, n_drafted=3, n_accepted=2), step(n_drafted=5, n_accepted=4),
             step(paused=True), step(n_model=1, n_drafted=1, paused=True, probe=True),
             step(n_model=12, n_drafted=12, n_accepted=11), step(n_drafted=2, paused=True),
             step(paused=True, read=True), step(n_model=2, n_drafted=2, n_accepted=1, paused=True, probe=True,
                                                read=True)]
    assert compare.step_pattern(steps) == ".3LpP+LrR"
    assert compare.kept_pattern(steps) == ".24.0+0.1"


def test_verify_shapes_measures_both_orders(pair, tmp_path):
    d, report = pair
    out = tmp_path / "vs.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "verify_shapes.py"), "-m",
                        report["files"]["target"], "-ngl", "0", "--k", "1,3,8", "--reps", "3", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    med = json.loads(out.read_text())["median_ms"]
    assert set(med) == {"fixed", "varying"} and all(set(m) == {"1", "3", "8"} for m in med.values())
    assert all(v > 0 for m in med.values() for v in m.values())


def test_overlap_measures_each_alone_and_both_at_once(pair, tmp_path):
    d, report = pair
    out = tmp_path / "overlap.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "overlap.py"), "-m",
                        report["files"]["target"], "-d", report["files"]["draft"], "-ngl", "0", "--k", "1,3",
                        "--m", "2", "--reps", "3", "-t", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    med = json.loads(out.read_text())["median_ms"]
    assert set(med) == {"1", "3"}
    for row in med.values():
        assert set(row) == {"verify", "draft", "both", "hidden_share"}
        assert all(row[name] > 0 for name in ("verify", "draft", "both"))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "overlap.py"), "-m",
                        report["files"]["target"], "-d", report["files"]["draft"], "--m", "0"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "--m and --reps must be >= 1" in r.stderr


def test_the_trimmed_sdist_fits_the_device_call(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "pack.sh"), str(tmp_path / "pack")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    files = {p.name: p.stat().st_size for p in (tmp_path / "pack").iterdir()}
    assert "llama_cpp_python-0.3.36-trimmed.tar.gz" in files and "gguf-0.19.0-py3-none-any.whl" in files
    assert sum(files.values()) < 32 * 2**20  # with the repository, well inside the 64 MiB a call carries


def _fake_libllama(path: Path, sees_gpu: bool = True, *link_args: str) -> None:
    """A shared library at path with libllama's llama_supports_gpu_offload (answering sees_gpu), and
    llama_answer() returning 42."""
    src = path.parent / "fake_libllama.c"
    src.write_text("#include <stdbool.h>\nbool llama_supports_gpu_offload(void) { return %s; }\n"
                   "int llama_answer(void) { return 42; }\n" % ("true" if sees_gpu else "false"))
    subprocess.run(["gcc", "-shared", "-fPIC", *link_args, "-o", str(path), str(src)], check=True)


def _prebuilt(gpu_dir: Path, name: str, sees_gpu: bool = True, server_runs: bool = True) -> Path:
    """A tarball laid out as prebuild.sh packs one (site/llama_cpp/lib, build-lcp/bin), whose libllama
    says whether it sees a GPU and whose llama-server runs or does not."""
    import tarfile

    stage = gpu_dir.parent / f"stage-{gpu_dir.name}"
    lib = stage / "site" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    _fake_libllama(lib / "libllama.so", sees_gpu)
    (stage / "build-lcp" / "bin").mkdir(parents=True)
    server = stage / "build-lcp" / "bin" / "llama-server"
    server.write_text("#!/bin/sh\necho version: 1\nexit %d\n" % (0 if server_runs else 1))
    server.chmod(0o755)
    gpu_dir.mkdir(exist_ok=True)
    with tarfile.open(gpu_dir / name, "w:xz") as t:
        t.add(stage / "site", "site")
        t.add(stage / "build-lcp", "build-lcp")
    return gpu_dir / name


def _unpack(gpu_dir: Path, **env):
    env = dict(os.environ, SPECLLAMA_GPU_DIR=str(gpu_dir), OUT=str(gpu_dir / "out"),
               SPECLLAMA_PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "unpack"],
                          capture_output=True, text=True, env=env, timeout=120)


PREBUILT = "prebuilt-llama_cpp_python-0.3.36-cuda90-faON.tar.xz"


def test_run_sh_unpacks_a_prebuilt_build_that_loads(tmp_path):
    """run.sh build takes prebuild.sh's build, made on a machine without a GPU, in place of minutes
    of compiling on the lent one, where its libllama sees a GPU and llama-server runs."""
    g = tmp_path / "gpu"
    _prebuilt(g, PREBUILT)
    r = _unpack(g)
    assert r.returncode == 0, r.stderr
    assert f"unpacking {PREBUILT}" in r.stdout
    assert (g / "site" / "llama_cpp" / "lib" / "libllama.so").exists()
    assert (g / "build-lcp" / "bin" / "llama-server").exists()
    # without llama.cpp's programs (SPECLLAMA_GPU_PEERS=0) a server that fails does not matter
    g = tmp_path / "gpu-no-peers"
    _prebuilt(g, PREBUILT, server_runs=False)
    assert _unpack(g, SPECLLAMA_GPU_PEERS="0").returncode == 0


@pytest.mark.parametrize("sees_gpu, server_runs", [(False, True), (True, False)])
def test_run_sh_builds_from_the_sources_where_a_prebuilt_build_does_not_load(tmp_path, sees_gpu, server_runs):
    g = tmp_path / "gpu"
    _prebuilt(g, PREBUILT, sees_gpu=sees_gpu, server_runs=server_runs)
    r = _unpack(g)
    assert r.returncode == 1
    assert f"{PREBUILT} does not load here; building from the sources" in r.stderr
    # nothing of it left for the build from the sources to mix with
    assert not (g / "site" / "llama_cpp").exists() and not (g / "build-lcp" / "bin").exists()
    assert not (g / "prebuilt.env").exists()


@pytest.mark.parametrize("name, env", [
    (PREBUILT.replace("cuda90", "cuda80"), {}),  # made for another GPU architecture
    (PREBUILT.replace("faON", "faOFF"), {}),  # without the flash-attention kernels the build asks for
    (PREBUILT, {"SPECLLAMA_GPU_PREBUILT": "0"}),  # declined
    (PREBUILT, {"SPECLLAMA_GPU_CUDA": "0"}),  # a CPU build
])
def test_run_sh_leaves_a_prebuilt_build_of_another_kind(tmp_path, name, env):
    g = tmp_path / "gpu"
    _prebuilt(g, name)
    r = _unpack(g, **env)
    assert r.returncode == 1 and "unpacking" not in r.stdout
    assert not (g / "site").exists()


def _fake_build(g: Path) -> None:
    """What run.sh build-llama leaves in .gpu/, in miniature: libllama in llama_cpp/lib and lib as a
    wheel installs it (copies, not links), the two programs in build-lcp/bin linked against it and
    against a library of their own there, everything found by RUNPATHs that name this machine's
    paths, and pip's note of the source's path."""
    lib, bin_ = g / "site" / "llama_cpp" / "lib", g / "build-lcp" / "bin"
    dist_info = g / "site" / "llama_cpp_python-0.3.36.dist-info"
    for d in (lib, g / "site" / "lib", g / "site" / "include", bin_, dist_info):
        d.mkdir(parents=True)
    (g / "site" / "include" / "llama.h").write_text("/* header */\n")
    (dist_info / "direct_url.json").write_text(f'{{"url": "file://{g}/src"}}')
    _fake_libllama(lib / "libllama.so.0.5.0", True, "-Wl,-soname,libllama.so.0", f"-Wl,-rpath,{g}/elsewhere")
    for d in (lib, g / "site" / "lib"):
        for name in ("libllama.so.0.5.0", "libllama.so.0", "libllama.so"):
            if not (d / name).exists():
                (d / name).write_bytes((lib / "libllama.so.0.5.0").read_bytes())
    (g / "mtmd.c").write_text("int mtmd_answer(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libmtmd.so.0", "-o", str(bin_ / "libmtmd.so.0"),
                    str(g / "mtmd.c")], check=True)
    (g / "main.c").write_text('#include <stdio.h>\nint llama_answer(void); int mtmd_answer(void);\n'
                              'int main(void) {\n'
                              '    printf("version: %d\\n", llama_answer() + mtmd_answer());\n'
                              '    return 0;\n}\n')
    for prog in ("llama-server", "llama-speculative-simple"):
        subprocess.run(["gcc", "-o", str(bin_ / prog), str(g / "main.c"), str(lib / "libllama.so"),
                        str(bin_ / "libmtmd.so.0"), f"-Wl,-rpath,{lib}:{bin_}"], check=True)


def test_prebuild_packs_a_build_that_runs_from_another_directory(tmp_path):
    """prebuild.sh pack: the build run.sh build-llama left, packed so that it runs wherever run.sh
    unpacks it (nothing names the building machine's paths; libraries found by $ORIGIN), each
    library's copies packed once, and run.sh's unpack takes it there."""
    import tarfile

    g = tmp_path / "built"
    _fake_build(g)
    env = dict(os.environ, SPECLLAMA_GPU_DIR=str(g), SPECLLAMA_CACHE=str(tmp_path / "cache"),
               SPECLLAMA_PYTHON=sys.executable)
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "prebuild.sh"), "pack"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    carried = int(r.stdout.split("a device call carries ")[1].split(" MiB")[0])  # (the repository's files, at least)
    assert 1 <= carried <= 64
    tarball = g / PREBUILT
    with tarfile.open(tarball) as t:
        members = {m.name: m for m in t.getmembers()}
        files = {name: t.extractfile(m).read() for name, m in members.items() if m.isfile()}
    libllama = [name for name, m in members.items() if "libllama.so" in name]
    assert len(libllama) == 6 and sum(members[name].isfile() for name in libllama) == 1  # one copy, five links
    assert "build-lcp/bin/libmtmd.so.0" in files  # the programs' own library, beside them
    assert not any(name.endswith("direct_url.json") for name in members)
    assert not any(str(g).encode() in data for data in files.values())
    # unpacked somewhere else, the programs run and the library loads
    h = tmp_path / "gpu machine"
    h.mkdir()
    (h / PREBUILT).write_bytes(tarball.read_bytes())
    r = _unpack(h)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(h / "build-lcp" / "bin" / "llama-speculative-simple")], capture_output=True, text=True)
    assert out.stdout == "version: 43\n"


def test_every_shape_is_one_llama_cpp_can_build():
    """Each shape's heads divide its width and its key-value heads its heads, and the target is at
    least as wide as the draft (its embedding holds the draft's): what a model of that shape needs."""
    for name, (target, draft, n_vocab) in shaped_models.SHAPES.items():
        for s in (target, draft):
            assert s.n_embd % s.n_head == 0 and s.n_head % s.n_head_kv == 0, name
            assert (s.n_embd // s.n_head) % 2 == 0, name  # rope rotates pairs of dimensions
        assert target.n_embd >= draft.n_embd and n_vocab > shaped_models.N_SPECIAL + 256, name
    # the real models' widths, layers and heads (Qwen2.5-7B, -14B and -0.5B)
    assert shaped_models.SHAPES["qwen7b"][0] == shaped_models.Shape(3584, 28, 28, 4, 18944)
    assert shaped_models.SHAPES["qwen14b"][0] == shaped_models.Shape(5120, 48, 40, 8, 13824)
    assert shaped_models.SHAPES["qwen14b"][1] == shaped_models.SHAPES["qwen7b"][1] == \
        shaped_models.Shape(896, 24, 14, 2, 4864)
