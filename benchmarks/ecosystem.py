"""Run JAX libraries' own test suites on functrans and on JAX, and compare.

For each library (optax, chex, einops, flax.linen, flax.nnx) the runner takes the test files
of the library's source distribution and runs each with pytest twice: under JAX (a Python
that has jax installed) and under functrans (``python -m functrans.run -m pytest``, in a
Python without jax). It reports, per library, the tests that pass under each, and every test
that passes under JAX but not under functrans, grouped by the first line of its error.

    python benchmarks/ecosystem.py --jax-python /work/jaxvenv/bin/python \\
        --functrans-python /work/ftvenv/bin/python --src /work/eco_src --out ecosystem-report

``--src`` holds the unpacked sdists (``pip download --no-binary :all: --no-deps optax==0.2.8``
then ``tar xzf``; ``--download`` does both). The functrans Python needs the libraries
installed without their jax dependency (``pip install --no-deps``) and functrans importable.
Both Pythons need pytest. This is not part of the test suite: it needs the downloads.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

VERSIONS = {"optax": "0.2.8", "chex": "0.1.92", "einops": "0.8.2", "flax": "0.12.8",
            "equinox": "0.13.8", "jaxtyping": "0.3.11"}

# library -> (sdist name, test file globs relative to the unpacked sdist, extra environment)
SUITES = {
    "optax": ("optax", ["optax/**/*_test.py"], {}),
    "chex": ("chex", ["chex/**/*_test.py"], {}),
    "einops": ("einops", ["einops/tests/test_*.py"], {"EINOPS_TEST_BACKENDS": "jax"}),
    "flax.linen": ("flax", ["tests/linen/*_test.py"], {}),
    "flax.nnx": ("flax", ["tests/nnx/**/*_test.py", "tests/nnx/test_*.py"], {}),
}

# Tests of what only XLA has (its compiler IR, HLO text, device profiles, TPU/GPU layouts):
# (library, pattern on the test id, reason). They are listed apart, as not applicable.
NOT_APPLICABLE = [
    ("*", r"(?i)compiler_ir|hlo|stablehlo|as_text", "XLA's HLO text (compiler_ir)"),
    ("*", r"profiler|device_trace", "jax.profiler device traces"),
    ("chex", r"restrict_backends_test", "hooks into XLA's compiler (backend_compile)"),
]


def download(src: str) -> None:
    os.makedirs(src, exist_ok=True)
    for name, version in VERSIONS.items():
        folder = os.path.join(src, f"{name}-{version}")
        if os.path.isdir(folder):
            continue
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                        "--no-deps", f"{name}=={version}", "-d", src], check=True)
        subprocess.run(["tar", "xzf", os.path.join(src, f"{name}-{version}.tar.gz"), "-C", src],
                       check=True)


def test_files(src: str, library: str) -> tuple[str, list[str]]:
    sdist, patterns, _ = SUITES[library]
    root = os.path.join(src, f"{sdist}-{VERSIONS[sdist]}")
    files = sorted({os.path.relpath(path, root) for pattern in patterns
                    for path in glob.glob(os.path.join(root, pattern), recursive=True)})
    return root, files


def run_file(python: str, use_functrans: bool, root: str, path: str, env_extra: dict,
             timeout: float) -> dict:
    """Outcomes of one test file: {test id: ("passed"|"failed"|"skipped", message)}."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.xml")
        command = [python] + (["-m", "functrans.run"] if use_functrans else []) + [
            "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            f"--junitxml={report}", "-o", "junit_family=xunit1", path]
        env = dict(os.environ, **env_extra, JAX_PLATFORMS="cpu", PYTHONHASHSEED="0")
        if use_functrans:
            env.setdefault("FUNCTRANS_DEFAULT_BACKEND", "cpu")
        try:
            done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                                  timeout=timeout)
            tail = (done.stdout + done.stderr)[-3000:]
        except subprocess.TimeoutExpired:
            return {f"{path}::<file>": ("failed", f"Timeout: the file ran over {timeout:.0f} s")}
        if not os.path.exists(report):
            return {f"{path}::<file>": ("failed", _first_error_line(tail))}
        return _parse_junit(report, path)


def _first_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^(E\s+)?[A-Za-z_.]*(Error|Exception|Exit)\b", line):
            return line.removeprefix("E").strip()
    return lines[-1] if lines else "no output"


def _parse_junit(report: str, path: str) -> dict:
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{path}::{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = child.get("message") or (child.text or "").strip().splitlines()[-1:]
                if isinstance(message, list):
                    message = message[0] if message else child.tag
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message", "")
        if outcome == "failed" and (not message or message == "failed"):
            message = "failed"
        outcomes[test_id] = (outcome, message)
    return outcomes


def _cause(message: str) -> str:
    """The error's first line, with numbers, quoted values and addresses blurred, so the
    same cause on different values groups together."""
    line = message.strip().splitlines()[0] if message.strip() else "unknown"
    line = re.sub(r"0x[0-9a-f]+", "0x…", line)
    line = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", line)
    line = re.sub(r"(Arrays are not (almost )?equal).*", r"\1", line)
    return line[:200]


def not_applicable(library: str, test_id: str) -> str | None:
    for lib, pattern, reason in NOT_APPLICABLE:
        if lib in ("*", library.split(".")[0]) and re.search(pattern, test_id):
            return reason
    return None


def _files_to_rerun(results: dict) -> set[str]:
    """The files holding a test that passes under JAX and not (or not yet) under functrans."""
    passing_jax = {t for t, (o, _) in results["jax"].items() if o == "passed"}
    passing_ft = {t for t, (o, _) in results["functrans"].items() if o == "passed"}
    return {t.split("::")[0] for t in passing_jax - passing_ft}


def run_library(args, library: str, sides: list[str], only_files=None) -> dict:
    root, files = test_files(args.src, library)
    if only_files is not None:
        files = [f for f in files if f in only_files]
    env_extra = SUITES[library][2]
    results = {side: {} for side in sides}
    pythons = {"jax": (args.jax_python, False), "functrans": (args.functrans_python, True)}
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for path in files:
            for side in sides:
                python, use_functrans = pythons[side]
                jobs.append((side, pool.submit(run_file, python, use_functrans, root, path,
                                               env_extra, args.timeout)))
        for side, job in jobs:
            results[side].update(job.result())
    return results


def summarize(library: str, results: dict) -> dict:
    jax_results, ft_results = results["jax"], results["functrans"]
    passing_jax = {t for t, (o, _) in jax_results.items() if o == "passed"}
    passing_ft = {t for t, (o, _) in ft_results.items() if o == "passed"}
    regressions = collections.defaultdict(list)
    excluded = collections.defaultdict(list)
    for test in sorted(passing_jax - passing_ft):
        reason = not_applicable(library, test)
        if reason:
            excluded[reason].append(test)
            continue
        # a file that did not run under functrans counts every one of its tests
        file_level = f"{test.split('::')[0]}::<file>"
        outcome, message = ft_results.get(test, ft_results.get(
            file_level, ("failed", "not collected under functrans")))
        if outcome == "skipped":
            message = f"skipped: {message}"
        regressions[_cause(message)].append(test)
    applicable = len(passing_jax) - sum(len(v) for v in excluded.values())
    both = len((passing_jax & passing_ft))
    return {
        "library": library,
        "collected_functrans": len(ft_results),
        "passed_functrans": len(passing_ft),
        "passed_jax": len(passing_jax),
        "not_applicable": {k: len(v) for k, v in excluded.items()},
        "passing_under_both": both,
        "rate": both / applicable if applicable else 1.0,
        "causes": {k: v for k, v in sorted(regressions.items(), key=lambda kv: -len(kv[1]))},
    }


def table(summaries: list[dict]) -> str:
    rows = ["| library | pass under JAX 0.10.2 | pass under functrans | of JAX's passing, pass "
            "on functrans | not applicable (XLA-only) |", "|---|---|---|---|---|"]
    for s in summaries:
        na = sum(s["not_applicable"].values())
        applicable = s["passed_jax"] - na
        rows.append(f"| {s['library']} | {s['passed_jax']} | {s['passed_functrans']} | "
                    f"{s['passing_under_both']} / {applicable} ({100 * s['rate']:.1f}%) | "
                    f"{na} |")
    return "\n".join(rows)


def report(summaries: list[dict]) -> str:
    parts = ["# JAX libraries' own tests on functrans", "", table(summaries), ""]
    for s in summaries:
        parts.append(f"## {s['library']}: passing under JAX, not under functrans, by cause")
        for reason, count in s["not_applicable"].items():
            parts.append(f"- not applicable ({reason}): {count}")
        for cause, tests in s["causes"].items():
            parts.append(f"- **{len(tests)}** `{cause}`")
            for test in tests[:5]:
                parts.append(f"    - {test}")
            if len(tests) > 5:
                parts.append(f"    - ... {len(tests) - 5} more")
        parts.append("")
    return "\n".join(parts)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functrans-python", default=sys.executable,
                        help="a Python with functrans and the libraries, without jax")
    parser.add_argument("--jax-python", default=None,
                        help="a Python with jax 0.10.2 and the libraries (the baseline)")
    parser.add_argument("--src", required=True, help="folder of the unpacked sdists")
    parser.add_argument("--download", action="store_true", help="download the sdists first")
    parser.add_argument("--libraries", default=",".join(SUITES),
                        help=f"comma-separated, of {', '.join(SUITES)}")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per test file")
    parser.add_argument("--out", default="ecosystem-report",
                        help="folder for report.md, summary.json and the raw outcomes")
    parser.add_argument("--files", default=None,
                        help="comma-separated test files (relative to the sdist) to run, "
                             "replacing their outcomes in the previous run's raw file")
    parser.add_argument("--rerun-failing", action="store_true",
                        help="run on functrans only the files of the previous run (in --out) "
                             "holding a test that passed under JAX but not under functrans")
    parser.add_argument("--sides", default="jax,functrans",
                        help="which runs to make (jax, functrans, or none: report only); the "
                             "other side's outcomes come from the previous run's raw file")
    args = parser.parse_args(argv)
    if args.download:
        download(args.src)
    os.makedirs(args.out, exist_ok=True)
    summaries = []
    for library in args.libraries.split(","):
        start = time.time()
        raw_path = os.path.join(args.out, f"{library}.raw.json")
        results = {"jax": {}, "functrans": {}}
        if os.path.exists(raw_path):
            with open(raw_path) as f:
                results.update({side: {k: tuple(v) for k, v in outcomes.items()}
                                for side, outcomes in json.load(f).items()})
        sides = [side for side in args.sides.split(",") if side not in ("", "none")]
        only_files = None
        if args.files:
            only_files = set(args.files.split(","))
            for side in sides:
                results[side] = {t: o for t, o in results[side].items()
                                 if t.split("::")[0] not in only_files}
        if args.rerun_failing:
            sides, only_files = ["functrans"], _files_to_rerun(results)
            # a re-run file's outcomes replace the old ones
            results["functrans"] = {t: o for t, o in results["functrans"].items()
                                    if t.split("::")[0] not in only_files}
        if "jax" in sides and not args.jax_python:
            parser.error("--jax-python is needed to run the JAX side")
        for side, outcomes in run_library(args, library, sides, only_files).items():
            results[side].update(outcomes)
        with open(raw_path, "w") as f:
            json.dump(results, f, indent=0)
        summary = summarize(library, results)
        summaries.append(summary)
        print(f"{library}: {summary['passing_under_both']} of {summary['passed_jax']} "
              f"({100 * summary['rate']:.1f}%) in {time.time() - start:.0f} s", flush=True)
    text = report(summaries)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summaries, f, indent=1)
    print(table(summaries))


if __name__ == "__main__":
    main()
