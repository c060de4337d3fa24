"""The Slurm reference's own pieces (pure, fast): normalisation, comparison, the goldens' shape."""

from __future__ import annotations

from pathlib import Path

from tests.slurmref import compare
from tests.slurmref.normalise import Normaliser, column_key, split_keyvalue
from tests.slurmref.shapes import COMMANDS

GOLDEN = Path(__file__).resolve().parent / "golden"
NORM = Normaliser(ids={"completed": "7", "array": "9"}, hosts=("refnode", "vm"), dirs=("/tmp/ref-x",),
                  ports=("6817",))


def test_column_keys_drop_widths_but_keep_the_case_of_percent_codes():
    assert column_key("state%20") == "state"
    assert column_key("%.10i") == "%i"
    assert column_key("%P") == "%P" and column_key("%p") == "%p"
    assert column_key("NODELIST(REASON)") == "nodelist(reason)"


def test_job_ids_become_shape_names_in_id_columns_only():
    assert NORM.value("JobID", "9_[2-5%2]") == "{array}_[2-5%2]"
    assert NORM.value("JobID", "7.batch") == "{completed}.batch"
    assert NORM.value("JobIDRaw", "12") == "{id}"  # an array member's own id: no shape's
    assert NORM.value("AllocCPUS", "7") == "7"  # a count that happens to equal an id
    assert NORM.value("Dependency", "afterok:7(unfulfilled)") == "afterok:{completed}(unfulfilled)"
    assert NORM.value("StdOut", "/tmp/ref-x/work/slurm-9_4294967294.out") == "{dir}/work/slurm-{array}_4294967294.out"


def test_times_durations_hosts_partitions_and_pids():
    assert NORM.value("Submit", "2026-12-01T19:11:04") == "{time}"
    assert NORM.value("Elapsed", "00:01:27") == "{duration}"
    assert NORM.value("TIME", "0:00") == "{duration}"
    assert NORM.value("Timelimit", "00:01:00") == "00:01:00"  # a limit is the job's, compared as is
    assert NORM.value("ExitCode", "0:15") == "0:15"
    assert NORM.value("NodeList", "refnode") == "{node}"
    assert NORM.value("BatchHost", "vm") == "{node}"
    assert NORM.value("PARTITION", "debug*") == "{partition}*"
    assert NORM.value("AllocNode:Sid", "localhost:2903") == "localhost:{pid}"
    assert NORM.value("SlurmctldPort", "6817") == "{port}"


def test_a_table_keeps_its_header_and_joins_normalised_fields():
    text = ("             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
            "                 7     debug completed    root  R       0:05      1 refnode\n")
    lines = NORM.output(text, "table")
    assert lines[0] == text.splitlines()[0]
    assert lines[1] == "{completed}|{partition}|completed|root|R|{duration}|1|{node}"


def test_parsable_and_noheader_output():
    assert NORM.output("JobID|State\n9_0|COMPLETED\n", "parsable") == ["JobID|State", "{array}_0|COMPLETED"]
    assert NORM.output("7 R\n9_[1-3%2] PD\n", "table-noheader", ("%i", "%t")) == ["{completed}|R", "{array}_[1-3%2]|PD"]
    assert NORM.output("Submitted batch job 7\n", "text") == ["Submitted batch job {completed}"]


def test_scontrol_words_and_show_config_lines():
    assert split_keyvalue("   JobState=PENDING Reason=Dependency Dependency=afterok:4(unfulfilled)") == [
        "JobState=PENDING", "Reason=Dependency", "Dependency=afterok:4(unfulfilled)"]
    assert split_keyvalue("   Command=sleep 600") == ["Command=sleep 600"]
    assert split_keyvalue("MaxArraySize            = 1001") == ["MaxArraySize=1001"]


def test_compare_reports_each_difference_on_one_line():
    assert compare.compare("f", "parsable", ["A|B", "1|x"], ["A|B", "1|x"]) == []
    assert compare.compare("f", "parsable", ["A|B", "1|y", "2|z"], ["A|C", "1|x", "3|z"]) == [
        "f: header: reckon 'A|B' | slurm 'A|C'", "f: 1: C: reckon 'y' | slurm 'x'",
        "f: row: reckon (none) | slurm '3|z'", "f: row: reckon '2|z' | slurm (none)"]
    assert compare.compare("f", "parsable-noheader", ["1|a", "1|b"], ["1|a", "1|c"], ("A", "B")) == [
        "f: row: reckon '1|b' | slurm (none)", "f: row: reckon (none) | slurm '1|c'"]  # ids repeat
    assert compare.compare("f", "keyvalue", ["JobId=1", "A=1", "C=3", "JobId=2", "A=1"],
                           ["JobId=2", "A=1", "JobId=1", "A=2", "B=2", "JobId=3"]) == [
        "f: record JobId=3: reckon (none) | slurm (the record)",
        "f: JobId=1: A: reckon '1' | slurm '2'", "f: JobId=1: missing B: reckon (none) | slurm '2'",
        "f: JobId=1: extra C: reckon '3' | slurm (none)"]
    assert compare.compare("f", "keyvalue", ["Configuration data as of {time}", "A=1"],
                           ["Configuration data as of {time}", "A=2"]) == ["f: config: A: reckon '1' | slurm '2'"]
    known = {"f: * missing *": "reckon leaves B out"}
    assert compare.unexplained(["f: JobId=1: missing B: reckon (none) | slurm '2'", "g: x"], known) == ["g: x"]


def test_a_sacct_table_is_cut_by_its_rule_line():
    text = ("JobID           JobName    Account State\n"
            "------------ ---------- ---------- -----\n"
            "7.batch           batch               R\n")
    assert NORM.output(text, "table")[2] == "{completed}.batch|batch||R"


def test_the_goldens_are_the_commands_of_shapes_py():
    """Every golden is a command of shapes.py run in its phase, and names ids only by shape."""
    assert GOLDEN.joinpath("VERSION").read_text().startswith("slurm-wlm 22.05")
    expected = {f"{p}/{c.file}.txt" for c in COMMANDS for p in c.phases}
    found = {str(p.relative_to(GOLDEN)) for p in GOLDEN.glob("*/*.txt")}
    assert found == expected
    for path in GOLDEN.rglob("*.txt"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("$ "), path
        assert "{ids}" not in first, path  # the capture writes the ids out, by name
