"""WarmRunLauncher: runs launched through a real Dagster instance run in local worker processes, the
first one new, the next ones started ahead of their runs; termination, a lost waiting process, and
run monitoring's health check."""
from __future__ import annotations

import os
import signal
import sys
import textwrap
import time

import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.launcher import WorkerStatus

from dagster_rw.dagster.launcher import PID_TAG, WORKER_TAG, WarmRunLauncher

JOBS = textwrap.dedent("""
    import os
    import time
    from pathlib import Path

    import dagster as dg

    @dg.op
    def write_pid(context):
        Path(context.op_config["out"]).write_text(str(os.getpid()))

    @dg.op
    def wait_for_file(context):
        Path(context.op_config["started"]).write_text(str(os.getpid()))
        while not Path(context.op_config["release"]).exists():
            time.sleep(0.1)

    @dg.job(executor_def=dg.in_process_executor)
    def quick():
        write_pid()

    @dg.job(executor_def=dg.in_process_executor)
    def slow():
        wait_for_file()

    defs = dg.Definitions(jobs=[quick, slow])
""")


def _launcher_config(preload: list[str] | None = None) -> dict:
    config = {"preload_modules": preload} if preload is not None else {}
    return {"run_launcher": {"module": "dagster_rw.dagster.launcher", "class": "WarmRunLauncher", "config": config}}


def _home(tmp_path) -> str:
    (tmp_path / "home").mkdir(exist_ok=True)
    return str(tmp_path / "home")


def _launch(instance, tmp_path, job_name: str, run_config: dict) -> str:
    (tmp_path / "jobs.py").write_text(JOBS)
    recon_repo = ReconstructableRepository.for_file(str(tmp_path / "jobs.py"), "defs", working_directory=str(tmp_path))
    recon_job = recon_repo.get_reconstructable_job(job_name)
    job_def = recon_job.get_definition()
    run = instance.create_run_for_job(job_def=job_def, run_config=run_config,
                                      job_code_origin=recon_job.get_python_origin())
    instance.launch_run(run.run_id, workspace=None)
    return run.run_id


def _wait_for(predicate, what: str, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout} s")


def _finished(instance, run_id: str) -> dg.DagsterRun:
    return _wait_for(lambda: (r := instance.get_run_by_id(run_id)) is not None and r.is_finished and r,
                     f"run {run_id} did not finish")


def test_runs_start_in_processes_started_ahead(tmp_path):
    with dg.instance_for_test(overrides=_launcher_config(), temp_dir=_home(tmp_path)) as instance:
        assert isinstance(instance.run_launcher, WarmRunLauncher)
        assert instance.run_launcher.preload_modules == ["dagster_rw.dagster"]
        pids, kinds = [], []
        for i in range(3):
            out = tmp_path / f"out{i}"
            run_id = _launch(instance, tmp_path, "quick", {"ops": {"write_pid": {"config": {"out": str(out)}}}})
            run = _finished(instance, run_id)
            assert run.status == dg.DagsterRunStatus.SUCCESS
            # the op ran in the process the launcher recorded, a process apart from this one
            assert int(out.read_text()) == int(run.tags[PID_TAG]) != os.getpid()
            pids.append(int(run.tags[PID_TAG]))
            kinds.append(run.tags[WORKER_TAG])
        assert kinds == ["new", "warm", "warm"]
        assert len(set(pids)) == 3
        waiting = list(instance.run_launcher._waiting.values())
        assert len(waiting) == 1 and waiting[0].poll() is None
    # disposing of the instance ends the waiting process, not a run
    assert waiting[0].wait(10) is not None


def _started_slow_run(instance, tmp_path):
    """Launch the job whose op waits for a file, and wait until the op runs: (run id, run)."""
    started, release = tmp_path / "started", tmp_path / "release"
    config = {"ops": {"wait_for_file": {"config": {"started": str(started), "release": str(release)}}}}
    run_id = _launch(instance, tmp_path, "slow", config)
    _wait_for(started.exists, "the op did not start")
    return run_id, instance.get_run_by_id(run_id)


def test_terminate_cancels_the_run_in_its_worker(tmp_path):
    with dg.instance_for_test(overrides=_launcher_config(), temp_dir=_home(tmp_path)) as instance:
        run_id, run = _started_slow_run(instance, tmp_path)
        assert run.status == dg.DagsterRunStatus.STARTED
        assert instance.run_launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
        assert instance.run_launcher.terminate(run_id)
        assert _finished(instance, run_id).status == dg.DagsterRunStatus.CANCELED
        assert not instance.run_launcher.terminate(run_id)  # finished: nothing to terminate


def test_a_killed_worker_fails_its_health_check(tmp_path):
    with dg.instance_for_test(overrides=_launcher_config(), temp_dir=_home(tmp_path)) as instance:
        run_id, run = _started_slow_run(instance, tmp_path)
        os.kill(int(run.tags[PID_TAG]), signal.SIGKILL)
        launcher = instance.run_launcher
        health = _wait_for(lambda: (h := launcher.check_run_worker_health(run)).status != WorkerStatus.RUNNING and h,
                           "the killed worker still reads as running")
        assert health.status == WorkerStatus.FAILED and "-9" in health.msg
        # another process's launcher (e.g. after a restart) knows the worker only by the run's tag
        other = WarmRunLauncher()
        other.register_instance(instance)
        assert other.check_run_worker_health(run).status == WorkerStatus.FAILED


def test_a_lost_waiting_process_falls_back_to_a_new_one(tmp_path):
    with dg.instance_for_test(overrides=_launcher_config(preload=[]), temp_dir=_home(tmp_path)) as instance:
        first = _launch(instance, tmp_path, "quick", {"ops": {"write_pid": {"config": {"out": str(tmp_path / "a")}}}})
        assert _finished(instance, first).status == dg.DagsterRunStatus.SUCCESS
        (waiting,) = instance.run_launcher._waiting.values()
        waiting.kill()
        waiting.wait()
        second = _launch(instance, tmp_path, "quick", {"ops": {"write_pid": {"config": {"out": str(tmp_path / "b")}}}})
        run = _finished(instance, second)
        assert run.status == dg.DagsterRunStatus.SUCCESS and run.tags[WORKER_TAG] == "new"
        assert int((tmp_path / "b").read_text()) == int(run.tags[PID_TAG])
        # killed, not failed: the next run finds a process started ahead again
        third = _launch(instance, tmp_path, "quick", {"ops": {"write_pid": {"config": {"out": str(tmp_path / "c")}}}})
        assert _finished(instance, third).tags[WORKER_TAG] == "warm"


def test_the_worker_module_runs_dagsters_run_worker_command():
    """The waiting process ends quietly when its launcher closes its stdin without a run."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "dagster_rw.dagster.run_worker", "--preload", "no_such_module_x"],
                          input=b"", capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0
    assert b"could not preload no_such_module_x" in proc.stderr
