"""`WarmRunLauncher`: a run launcher whose run workers are started before their runs.

Dagster's default launcher has the code server start a new Python process per run (multiprocessing's
spawn): Python starts, imports Dagster, the code location and its libraries, opens the instance,
and only then runs the job. For dagster-rw's runs, one small epoch each, that start takes longer
than the run's steps. This launcher runs each run in a local process of its own as well, with
Dagster's own run worker command (`dagster api execute_run`, as the Docker and Kubernetes launchers
do), but it keeps one such process started ahead: Python, Dagster, the preloaded libraries and the
instance's storage already imported, waiting for a run. Launching writes the run's arguments to that
process and starts the next one for the run after. The code location itself is imported by the run,
as in a new worker, so a reloaded code location is never run from an older copy.

In the instance's dagster.yaml:

    run_launcher:
      module: dagster_rw.dagster.launcher
      class: WarmRunLauncher
      config:
        preload_modules: [dagster_rw.dagster]

`preload_modules` (default: `dagster_rw.dagster`) are imported by the waiting process; a module that
fails to import is skipped. A code location on another Python (`executable_path`) gets a waiting
process of that Python; where that cannot run dagster-rw's worker, runs start as new processes.
The first run of a process that launches runs (the daemon, or the webserver when it launches)
starts a new process too: the waiting one is started only by a launch, so the many processes that
open the instance without launching (run workers, command line tools) start none.

Runs are terminated with SIGTERM (Dagster's run worker interrupts the run and marks it canceled);
run monitoring asks the process by its id (the run's `dagster_rw/run_worker_pid` tag) whether it
still runs.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence

from dagster import Field
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, RunLauncher, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from dagster._serdes import ConfigurableClass, ConfigurableClassData, serialize_value

PID_TAG = "dagster_rw/run_worker_pid"
WORKER_TAG = "dagster_rw/run_worker"  # 'warm' (started ahead) or 'new'
DEFAULT_PRELOAD = ("dagster_rw.dagster",)
KEEP_EXIT_CODES = 256  # the exit codes of this many ended workers answer run monitoring


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    """Runs each run in a local process started ahead of it (see the module's description)."""

    def __init__(self, preload_modules: Sequence[str] | None = None, inst_data: ConfigurableClassData | None = None):
        self._inst_data = inst_data
        self.preload_modules = list(DEFAULT_PRELOAD if preload_modules is None else preload_modules)
        self._lock = threading.Lock()
        self._waiting: dict[str, subprocess.Popen] = {}  # by Python executable
        self._cannot_warm: set[str] = set()  # executables whose waiting process failed before a run
        self._workers: dict[str, subprocess.Popen] = {}  # run id -> its worker, while it runs
        self._exit_codes: OrderedDict[str, tuple[int, int]] = OrderedDict()  # run id -> (pid, code), the latest
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls):
        return {"preload_modules": Field([str], is_required=False,
                                         description="Modules the waiting run worker imports ahead of its run.")}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value):
        return cls(inst_data=inst_data, **config_value)

    # -- launching ------------------------------------------------------------------------------
    def launch_run(self, context: LaunchRunContext) -> None:
        from dagster._grpc.types import ExecuteRunArgs

        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None:
            raise ValueError(f"WarmRunLauncher: run {run.run_id} has no job origin to load its code from")
        args = ExecuteRunArgs(job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref(),
                              set_exit_code_on_failure=True)
        executable = origin.executable_path or sys.executable
        payload = serialize_value(args)
        worker = self._hand_over(executable, payload)
        warm = worker is not None
        if worker is None:  # Dagster's run worker command, on the code location's Python
            worker = subprocess.Popen([executable, "-m", "dagster", "api", "execute_run", payload],
                                      stdin=subprocess.DEVNULL)
        with self._lock:
            self._workers[run.run_id] = worker
        threading.Thread(target=self._reap, args=(run.run_id, worker), daemon=True,
                         name=f"run-worker-{worker.pid}").start()
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(worker.pid), WORKER_TAG: "warm" if warm else "new"})
        self._start_waiting(executable)

    def _hand_over(self, executable: str, payload: str) -> subprocess.Popen | None:
        """The waiting process of `executable`, given the run's arguments; None if there is none."""
        with self._lock:
            worker = self._waiting.pop(executable, None)
        if worker is None:
            return None
        if worker.poll() is None:
            try:
                worker.stdin.write(payload.encode() + b"\n")
                worker.stdin.close()
                return worker
            except OSError:  # it ended just now
                worker.wait()
        if worker.returncode > 0:  # it failed by itself (e.g. dagster-rw is not installed on that Python)
            self._cannot_warm.add(executable)
        return None  # ended by a signal (killed, out of memory): the next one is started as usual

    def _start_waiting(self, executable: str) -> None:
        if executable in self._cannot_warm:
            return
        command = [executable, "-m", "dagster_rw.dagster.run_worker",
                   "--instance-ref", serialize_value(self._instance.get_ref())]
        for name in self.preload_modules:
            command += ["--preload", name]
        with self._lock:
            if executable in self._waiting and self._waiting[executable].poll() is None:
                return
            self._waiting[executable] = subprocess.Popen(command, stdin=subprocess.PIPE)

    def _reap(self, run_id: str, worker: subprocess.Popen) -> None:
        """Waits for a run's worker; one that ended before its run started fails the run (it would
        otherwise stay STARTING until run monitoring's start timeout)."""
        code = worker.wait()
        with self._lock:
            self._workers.pop(run_id, None)
            self._exit_codes[run_id] = (worker.pid, code)
            while len(self._exit_codes) > KEEP_EXIT_CODES:
                self._exit_codes.popitem(last=False)
        if code == 0 or not self.has_instance:
            return
        run = self._instance.get_run_by_id(run_id)
        if run is not None and run.status in (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING):
            self._instance.report_engine_event(
                f"Run worker process {worker.pid} exited with code {code} before the run started.", run,
                cls=self.__class__)
            self._instance.report_run_failed(run)

    # -- termination and monitoring --------------------------------------------------------------
    def _pid(self, run: DagsterRun) -> int | None:
        pid = run.tags.get(PID_TAG)
        return int(pid) if pid and pid.isdigit() else None

    def terminate(self, run_id: str) -> bool:
        if not self.has_instance:
            return False
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        pid = self._pid(run)
        if pid is None:
            return False
        self._instance.report_run_canceling(run)
        with self._lock:
            worker = self._workers.get(run_id)
        try:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        with self._lock:
            worker = self._workers.get(run.run_id)
            exited = self._exit_codes.get(run.run_id)
        if worker is not None and worker.poll() is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(worker.pid))
        if worker is not None or exited is not None:
            pid, code = (worker.pid, worker.returncode) if worker is not None else exited
            if code == 0:
                return CheckRunHealthResult(WorkerStatus.SUCCESS, run_worker_id=str(pid))
            return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} exited with code {code}",
                                        run_worker_id=str(pid))
        pid = self._pid(run)
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, "no run worker process recorded for this run")
        try:  # a worker another process launched (or this process before a restart)
            os.kill(pid, 0)
        except ProcessLookupError:
            return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} is gone", run_worker_id=str(pid))
        except PermissionError:
            pass
        return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(pid))

    def dispose(self) -> None:
        """Ends the waiting processes (not the runs' workers: their runs go on)."""
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
        for worker in waiting:
            if worker.poll() is None:
                worker.terminate()
        for worker in waiting:
            try:
                worker.wait(5)
            except subprocess.TimeoutExpired:
                worker.kill()
