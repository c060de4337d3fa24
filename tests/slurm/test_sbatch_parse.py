"""sbatch's parsing, without a controller: getopt_long's rules, Slurm's value formats, the
``#SBATCH`` rules, the spec dicts (checked by the model's JobSpec, as the controller checks
them), and a walk of the option table: every option is handled, warned or refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reckon.daemon.slurm import argv as getopt
from reckon.daemon.slurm import options as table
from reckon.daemon.slurm import sbatch, srun, values
from reckon.daemon.slurm.common import SlurmCommandError, signal_number
from reckon.model.jobs import JobSpec

OPTS = [("job-name", "J", 1), ("hold", "H", 0), ("exclusive", None, 2), ("export", None, 1),
        ("export-file", None, 1), ("time", "t", 1), ("verbose", "v", 0)]


@pytest.mark.parametrize("words, parsed, operands", [
    (["-J", "a", "s.sh"], [("job-name", "a")], ["s.sh"]),
    (["-Ja", "s.sh"], [("job-name", "a")], ["s.sh"]),
    (["--job-name=a", "s.sh", "-H"], [("job-name", "a")], ["s.sh", "-H"]),  # + mode: stops at the script
    (["--job-name", "-x", "s.sh"], [("job-name", "-x")], ["s.sh"]),  # a required argument may start with -
    (["-HvJa"], [("hold", None), ("verbose", None), ("job-name", "a")], []),  # clustered
    (["--ti=5", "--job=n"], [("time", "5"), ("job-name", "n")], []),  # unique prefixes
    (["--export=ALL"], [("export", "ALL")], []),  # an exact match beats being a prefix of --export-file
    (["--exclusive", "user"], [("exclusive", None)], ["user"]),  # an optional argument only attached
    (["--exclusive=user"], [("exclusive", "user")], []),
    (["--", "-H"], [], ["-H"]),
    (["-"], [], ["-"]),
])
def test_getopt_long_rules(words, parsed, operands):
    assert getopt.parse(words, OPTS, permute=False) == (parsed, operands)


def test_permuting_takes_options_after_operands():
    assert getopt.parse(["123", "--verbose", "456", "-Jx"], OPTS, permute=True) == (
        [("verbose", None), ("job-name", "x")], ["123", "456"])


@pytest.mark.parametrize("words, error", [
    (["--nope"], "unrecognized option '--nope'"),
    (["--ex=1"], "option '--ex' is ambiguous; possibilities: '--exclusive' '--export' '--export-file'"),
    (["--hold=1"], "option '--hold' doesn't allow an argument"),
    (["--time"], "option '--time' requires an argument"),
    (["-t"], "option requires an argument -- 't'"),
    (["-q"], "invalid option -- 'q'"),
])
def test_getopt_long_errors(words, error):
    with pytest.raises(getopt.OptionError, match=None) as info:
        getopt.parse(words, OPTS, permute=False)
    assert str(info.value) == error


@pytest.mark.parametrize("text, seconds", [
    ("5", 300), ("5:30", 330), ("1:02:03", 3723), ("2-3", 2 * 86400 + 3 * 3600), ("1-0:30", 86400 + 1800),
    ("1-2:3:4", 86400 + 7200 + 180 + 4), ("UNLIMITED", None), ("infinite", None), ("0", None), ("90", 5400),
])
def test_slurm_time_formats(text, seconds):
    assert values.parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "x", "1-", "-5", "1.5", "1-2-3"])
def test_bad_times_are_one_line(text):
    with pytest.raises(SlurmCommandError, match="Invalid time limit"):
        values.parse_time(text)


@pytest.mark.parametrize("text, size", [("100", 100 << 20), ("4G", 4 << 30), ("4GB", 4 << 30), ("512m", 512 << 20),
                                        ("1T", 1 << 40), ("2048K", 2 << 20), ("0", 0), ("1K", 1 << 20)])
def test_memory_sizes_default_to_mib(text, size):
    assert values.parse_mem(text) == size


def test_gres_gpus_licenses_dependencies_signals():
    assert values.parse_gres("gpu:2,gpu:tesla:1,license:3,fpga") == (3, {"license": 3, "fpga": 1})
    assert values.parse_gpus("a100:4") == 4
    assert values.parse_licenses("lic@db:2,other") == {"lic": 2, "other": 1}
    assert values.parse_dependency("afterok:1:2,afterany:3,afternotok:4") == {
        "after": ["1", "2"], "after_any": ["3"], "after_not_ok": ["4"]}
    assert values.parse_dependency("afterok:7?") == {"after": ["7"]}
    assert values.parse_dependency("singleton") == {"singleton": True}
    assert values.parse_dependency("afterok:3,singleton") == {"after": ["3"], "singleton": True}
    for bad in ("singleton:4", "after:1", "afterok:1?afterany:2", "afterok:1+5", "aftercorr:1"):
        with pytest.raises(SlurmCommandError):
            values.parse_dependency(bad)
    assert values.parse_signal("USR2@90") == (12, 90, False)
    assert values.parse_signal("B:SIGTERM@600") == (15, 600, True)
    assert values.parse_signal("10") == (10, 60, False)  # Slurm's default: 60 s before the limit
    assert signal_number("sigkill") == 9
    with pytest.raises(SlurmCommandError):
        values.parse_signal("R:USR1@5")
    with pytest.raises(SlurmCommandError):
        signal_number("NOPE")


def test_the_signal_table_is_linux():
    import signal

    for name, number in __import__("reckon.daemon.slurm.common", fromlist=["SIGNALS"]).SIGNALS.items():
        if hasattr(signal, f"SIG{name}"):
            assert getattr(signal, f"SIG{name}") == number, name


def test_output_patterns_in_reckons_letters():
    assert values.translate_pattern("/x/%A_%a_%t_log.out", "-o") == "/x/%A_%I_0_log.out"
    assert values.translate_pattern("%x-%j-%u-%N-%%.out", "-o") == "%x-%j-%u-%N-%%.out"
    assert values.translate_pattern("a\\%j", "-o") == "a%%j"  # a backslash: no substitution
    for bad in ("%5j.out", "%b.out", "%"):
        with pytest.raises(SlurmCommandError):
            values.translate_pattern(bad, "--output")


def test_export():
    env = {"HOME": "/h", "A": "1", "SLURM_JOB_ID": "3"}
    assert dict(map(tuple, values.export_env(None, env))) == {"HOME": "/h", "A": "1"}  # the caller's own job stays
    assert values.export_env("NONE", env) == []
    assert dict(map(tuple, values.export_env("ALL,B=2", env))) == {"HOME": "/h", "A": "1", "B": "2"}
    assert values.export_env("A,B=x", env) == [["A", "1"], ["B", "x"]]


def test_the_token_stays_behind_unless_named():
    env = {"HOME": "/h", "RECKON_TOKEN": "s3cret", "RECKON_TOKEN_FILE": "/t"}
    assert dict(map(tuple, values.export_env(None, env))) == {"HOME": "/h", "RECKON_TOKEN_FILE": "/t"}
    assert dict(map(tuple, values.export_env("ALL,RECKON_TOKEN", env)))["RECKON_TOKEN"] == "s3cret"


SCRIPT = """#!/bin/bash
#SBATCH -J first --time=10 # a comment
  # an indented comment

#SBATCH --comment="two words"
##SBATCH --qos=off
#SBATCHX --qos=off
#SBATCH --partition 'p 1'
echo hello
#SBATCH --account=late
"""


def test_sbatch_lines_stop_at_the_first_command():
    assert values.script_directives(SCRIPT) == ["-J", "first", "--time=10", "--comment=two words",
                                                "--partition", "p 1"]


def test_the_command_line_overrides_the_script():
    script, _ = sbatch.parse_args(values.script_directives(SCRIPT))
    cmdline, operands = sbatch.parse_args(["-t", "1:00", "--no-requeue", "--requeue", "x.sh", "-J", "arg"])
    opts = sbatch.merge(list(script.items()), list(cmdline.items()))
    assert operands == ["x.sh", "-J", "arg"]
    assert opts["job-name"] == "first" and opts["time"] == "1:00" and "no-requeue" not in opts


def _spec(words: list[str], script: str | None = "#!/bin/sh\ntrue\n", array: bool = False) -> dict:
    opts, _ = sbatch.parse_args(words)
    spec = sbatch.spec_of(opts, script, ["job.sh"], environ={"PATH": "/bin"}, cwd="/w", array=array,
                          default_name="job.sh")
    JobSpec.from_dict(spec)  # what the controller will check
    return spec


def test_specs_the_model_accepts():
    spec = _spec(["-c", "4", "--mem-per-cpu=1G", "-G", "2", "--gres=license:1", "-t", "1-0", "--signal=B:USR1@30",
                  "-o", "out-%j.txt", "-D", "sub", "-p", "gpu", "-A", "lab", "--qos=hi", "--wckey=w", "-C", "avx",
                  "--comment=c", "--open-mode=append", "-d", "afterok:1,afterany:2", "-N", "1", "-n", "1"])
    assert spec["slots"] == 4 and spec["mem"] == 4 << 30 and spec["gpus"] == 2 and spec["gres"] == [["license", 1]]
    assert spec["time_limit"] == 86400 and (spec["warn_signal"], spec["warn_before"], spec["warn_batch_only"]) == (
        10, 30, True)
    assert spec["cwd"] == "/w/sub" and spec["output"] == spec["error"] == "out-%j.txt"
    assert dict(spec["labels"]) == {"account": "lab", "qos": "hi", "wckey": "w", "constraint": "avx", "comment": "c"}
    assert spec["partition"] == "gpu"  # the real field (issue #22): the controller checks it and labels it
    assert spec["after"] == ["1"] and spec["after_any"] == ["2"] and spec["open_mode"] == "append"
    assert spec["slurm_env"] is True and spec["script"].startswith("#!") and spec["command"] == ["job.sh"]
    default = _spec([])
    assert default["output"] == default["error"] == "slurm-%j.out" and default["slots"] == 1
    assert _spec([], array=True)["output"] == "slurm-%A_%I.out"
    assert _spec(["--cpus-per-gpu=3", "--gpus-per-node=2", "--mem-per-gpu=100"])["slots"] == 6
    assert _spec(["--clusters=reckon", "--cluster", "all"])["slots"] == 1


@pytest.mark.parametrize("words, error", [
    (["-N", "2"], "--nodes=2: reckon runs single-node jobs (at most 1 node)"),
    (["-n", "4"], "--ntasks=4: reckon runs one task per job (at most 1)"),
    (["--ntasks-per-node=2"], "--ntasks-per-node=2: reckon runs one task per job (at most 1)"),
    (["--mem-per-gpu=1G"], "--mem-per-gpu needs GPUs (--gpus, --gres=gpu:N)"),
    (["--cluster=other"], "--cluster=other: reckon is one cluster, named reckon (or give all)"),
    (["--mem=1G", "--mem-per-cpu=1G"], "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive."),
])
def test_multi_node_asks_are_refused_naming_the_limit(words, error):
    with pytest.raises(SlurmCommandError) as info:
        _spec(words)
    assert str(info.value) == error


def test_array_ranges():
    assert sbatch.check_array("0-9%2") == "0-9%2" and sbatch.check_array("1-99:2") == "1-99:2"
    assert sbatch.check_array(" 1,3,5 ") == "1,3,5" and sbatch.check_array("1-3,7,10-20:5%4") == "1-3,7,10-20:5%4"
    for bad in ("1-x", "a", "1,,3", "1%2,3", "1,3%", "5-1,7"):
        with pytest.raises(SlurmCommandError, match="Invalid job array specification"):
            sbatch.check_array(bad)


def _value(option) -> list[str]:
    name, _, arg = option[:3]
    return [f"--{name}=1"] if arg == 2 else [f"--{name}", "1"] if arg == 1 else [f"--{name}"]


@pytest.mark.parametrize("option", table.SBATCH, ids=lambda o: o[0])
def test_every_sbatch_option_is_handled_warned_or_refused(option, capsys):
    """The table walk: a handled option has its code in sbatch.spec_of; a warned one is one line
    on stderr and the job goes on; a refused one is one line and nothing is submitted."""
    name, _, _, action, why = option
    opts = sbatch.merge(*[getopt.parse(_value(option), table.table(table.SBATCH), permute=False)[0]])
    assert list(opts) == [name]
    if action == table.HANDLED:
        assert name in sbatch.HANDLED
        return
    assert name not in sbatch.HANDLED
    if action == table.REFUSED:
        with pytest.raises(SlurmCommandError) as info:
            sbatch.refuse_and_warn(opts)
        assert str(info.value) == f"{table.spelled(option)} is not supported by reckon ({why})"
    else:
        sbatch.refuse_and_warn(opts)
        assert capsys.readouterr().err == f"sbatch: warning: {table.spelled(option)} is ignored by reckon ({why})\n"


def test_the_tables_are_consistent():
    for options in (table.SBATCH, table.SRUN):
        names = [o[0] for o in options]
        shorts = [o[1] for o in options if o[1]]
        assert len(names) == len(set(names)) and len(shorts) == len(set(shorts))
        assert all(o[3] in "HWR" and o[4] for o in options)
    handled = {o[0] for o in table.SRUN if o[3] == table.HANDLED}
    assert handled - srun.HANDLED <= sbatch.HANDLED  # the rest: a job outside one, built by sbatch.spec_of


@pytest.mark.parametrize("data, error", [
    (b"", "Batch script is empty!"), (b"echo hi\n", "This does not look like a batch script"),
    (b"#!/bin/sh\r\necho\r\n", "DOS line breaks"), (b"#!/bin/sh\n\0", "NULL character"),
])
def test_bad_scripts_are_one_line(tmp_path, data, error):
    path = tmp_path / "s.sh"
    path.write_bytes(data)
    with pytest.raises(SlurmCommandError, match=error):
        sbatch.read_script([str(path)], {})


def test_wrap_is_slurms_script():
    text, name, args = sbatch.read_script([], {"wrap": "echo hi"})
    assert text == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\necho hi\n" and name == "sbatch"
    with pytest.raises(SlurmCommandError, match="Script arguments not permitted with --wrap"):
        sbatch.read_script(["x"], {"wrap": "echo"})


def test_srun_step_patterns():
    env = {"SLURM_JOB_ID": "7", "SLURM_ARRAY_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "2", "SLURM_JOB_NAME": "n"}
    assert srun.expand("/x/%j_%A_%a_%t_%3t_%x_%%.out", env) == "/x/7_5_2_0_000_n_%.out"
    assert srun.expand("/x/%j.%s", {"SLURM_JOB_ID": "7"}) == "/x/7.0"


PROBE = """
import json, sys
sys.argv = ["sbatch"]
from reckon.daemon.slurm.sbatch import main
status = main(["--parsable", "-J", "x", "-t", "1:00", "--mem=1G", "--wrap", "true"])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def test_sbatch_is_light():
    """A whole sbatch (spec built, connection refused on port 1): no trio, no argparse, nothing
    of the model but what the shared client floor takes (daemon/wire.py: model.errors)."""
    env = {"RECKON_CONTROLLER": "ws://127.0.0.1:1", "PATH": "/usr/bin:/bin", "RECKON_SLURM_CONNECT_WAIT": "0"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, env=env)
    result = json.loads(out.stdout)
    assert result["status"] == 1, out
    assert out.stderr.startswith("sbatch: error: Batch job submission failed: controller unreachable at "), out
    heavy = [m for m in result["modules"] if m.split(".")[0] in ("trio", "argparse")
             or (m.startswith("reckon.model.") and m != "reckon.model.errors")]
    assert heavy == []


def test_docs_name_every_warned_and_refused_sbatch_option():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "slurm.md").read_text()
    missing = [o[0] for o in table.SBATCH if o[3] != table.HANDLED and f"--{o[0]}" not in text]
    assert missing == []


def test_a_line_sbatch_or_srun_cannot_parse_exits_255_as_slurms(capsys, monkeypatch):
    # Slurm 22.05's sbatch and srun exit(-1) on a bad option or value (checked against Debian's
    # slurm-wlm); scancel and the query commands differ (tests/slurm/test_srun_scancel.py).
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)  # srun outside a job: it parses, then submits
    for command, argv in ((sbatch, ["--bogus"]), (sbatch, ["-t", "abc", "--wrap", "true"]),
                          (sbatch, ["--mem=4Q", "--wrap", "true"]), (srun, ["--bogus", "true"])):
        assert command.main(argv) == 255, argv
        assert capsys.readouterr().err.count("\n") in (1, 2), argv  # one line (+ getopt's "Try ...")


def test_nice_is_the_specs_nice_100_without_a_value():
    assert _spec(["--nice=250"])["nice"] == 250
    assert _spec(["--nice"])["nice"] == 100
    assert "nice" not in _spec(["--nice=0"])
    with pytest.raises(SlurmCommandError, match="nice"):
        _spec(["--nice=20000"])
