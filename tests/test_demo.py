"""`bryo demo`, the main job: both backends end to end on tiny sizes, and its option errors."""

import argparse
from typing import ClassVar

import pytest

from bryo import read_index
from bryo._cli import main
from bryo._demo_args import DemoError, config_from_args, demo_arguments

TINY = ["--width", "8", "--layers", "2", "--steps", "4", "--finetune-steps", "3", "--batch", "16"]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for argument in demo_arguments():
        argument.add_to(parser)
    return parser.parse_args(list(argv))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["nnx", "equinox"])
def test_demo_runs_end_to_end(backend, tmp_path, capsys):
    from bryo._demo import run

    victim = tmp_path / "victim.txt"
    victim.write_text("not the demo's")
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.mox.xml").symlink_to(victim)  # a planted link is replaced, not followed
    config = config_from_args(parse(*TINY, "--backend", backend, "--out", str(out)))
    results = run(config)
    assert victim.read_text() == "not the demo's"
    assert not (out / "model.mox.xml").is_symlink()
    tmp_path = out
    out = capsys.readouterr().out
    assert f"bryo demo: {backend} backend" in out
    assert "MoX queries:" in out and '//module_call[@type="Linear"]' in out
    assert "ReLU -> GELU: 0 relu left" in out
    assert "LoRA fine-tuning (only LoRAParams trained)" in out
    assert "train: 4 steps, loss " in out and "finetune: 3 steps, loss " in out
    assert "all reloaded outputs match." in out
    for name in ("model.mox.xml", "model.mox.yson"):
        assert (tmp_path / name).stat().st_size > 0
    assert "restored into an abstract state: max difference" in out
    assert read_index(tmp_path / "checkpoint")  # an orbax checkpoint with bryo's index
    assert results["difference.xml"] < 1e-4 and results["differencecheckpoint"] < 1e-4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--width", "0"], "`--width` must be a positive integer, got 0."),
        (["--steps", "-3"], "`--steps` must be a positive integer, got -3."),
        (["--finetune-steps", "-1"], "`--finetune-steps` must be 0 or more, got -1."),
        (["--rank", "64", "--width", "8"], "`--rank` (64) must not exceed `--width` (8)."),
        (["--seed", "2**70"], "`--seed` must be an integer, got '2**70'."),
        (["--seed", str(2**70)], f"`--seed` must be at most {2**63 - 1}, got {2**70}."),
        (["--seed", str(2**63)], f"`--seed` must be at most {2**63 - 1}, got {2**63}."),
        (["--batch", "1e9"], "`--batch` must be a positive integer, got '1e9'."),
        (
            ["--batch", "1000000000"],
            "`--batch` must be at most 3584 (the training set's size), got 1000000000.",
        ),
        (["--layers", "١٢"], "`--layers` must be a positive integer, got '١٢'."),
    ],
)
def test_bad_values_are_named(argv, message):
    with pytest.raises(DemoError) as info:
        config_from_args(parse(*argv))
    assert str(info.value) == message


def test_bad_values_exit_2_with_the_message(capsys):
    assert main(["demo", "--width", "0"]) == 2
    assert "bryo demo: `--width` must be a positive integer" in capsys.readouterr().err


def test_bad_mesh_is_named(capsys):
    assert main(["demo", *TINY, "--mesh", "data=x"]) == 2
    assert "bryo demo: `--mesh data=x`" in capsys.readouterr().err


def test_unknown_backend_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--backend", "torch"])
    assert "invalid choice: 'torch'" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_runs_sharded_on_a_mesh(tmp_path):
    """`bryo demo --mesh data=4,model=2` on 8 host CPU devices, in its own process."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    command = [
        sys.executable,
        "-m",
        "bryo",
        "demo",
        *TINY,
        "--mesh",
        "data=4,model=2",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "8 cpu device(s), mesh {'data': 4, 'model': 2}" in done.stdout
    assert "all reloaded outputs match." in done.stdout


def test_model_parallel_mesh_is_refused_for_equinox(monkeypatch):
    import bryo._demo as demo
    from bryo._demo_args import DemoConfig
    from bryo._demo_models import EquinoxBackend

    class TwoByTwo:  # stands in for a mesh this one-device process cannot build
        axis_names: ClassVar = ("data", "model")
        shape: ClassVar = {"data": 2, "model": 2}

    monkeypatch.setattr(demo, "parse_mesh_spec", lambda spec: TwoByTwo())
    with pytest.raises(DemoError, match="carries no logical sharding axes"):
        demo._mesh(DemoConfig(mesh="data=2,model=2"), EquinoxBackend())


def test_mesh_without_a_data_axis_is_refused(monkeypatch):
    import bryo._demo as demo
    from bryo._demo_args import DemoConfig
    from bryo._demo_models import NNXBackend

    class ModelOnly:
        axis_names: ClassVar = ("model",)
        shape: ClassVar = {"model": 1}

    monkeypatch.setattr(demo, "parse_mesh_spec", lambda spec: ModelOnly())
    with pytest.raises(DemoError, match="needs a `data` axis"):
        demo._mesh(DemoConfig(mesh="model=1"), NNXBackend())


def one_line(err):
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_out_pointing_at_a_file_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import bryo._demo as demo

    monkeypatch.setattr(demo, "run", lambda config: pytest.fail("the demo started"))
    afile = tmp_path / "results.txt"
    afile.write_text("keep me")
    assert main(["demo", "--out", str(afile)]) == 2
    assert "is a file, not a folder" in one_line(capsys.readouterr().err)
    assert main(["demo", "--out", str(afile / "sub")]) == 2
    assert "cannot be made" in one_line(capsys.readouterr().err)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert main(["demo", "--out", str(tmp_path / "dangling")]) == 2
    assert "broken symlink" in one_line(capsys.readouterr().err)
    assert afile.read_text() == "keep me"


def test_bad_numbers_exit_2_on_one_line_before_any_work(capsys, monkeypatch):
    import bryo._demo as demo

    monkeypatch.setattr(demo, "run", lambda config: pytest.fail("the demo started"))
    for argv in (["--seed", "2**70"], ["--batch", "1e9"], ["--steps", "0"]):
        assert main(["demo", *argv]) == 2
        assert one_line(capsys.readouterr().err).startswith("bryo demo: `--")


def test_usage_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--width"])
    assert info.value.code == 2
    assert one_line(capsys.readouterr().err).startswith("bryo demo: argument --width: expected")


def test_write_new_replaces_a_symlink_without_following_it(tmp_path):
    from bryo._demo import write_new

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "model.mox.xml"
    link.symlink_to(victim)
    write_new(link, "<mox/>")
    assert victim.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "<mox/>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.mox.xml", "victim.txt"]


def test_quiet_flag_reaches_the_config():
    assert config_from_args(parse("--quiet")).quiet is True
    assert config_from_args(parse()).quiet is False
