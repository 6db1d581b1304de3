"""A throwaway single-node Slurm cluster for tests, from Debian's `slurm-wlm` and `munge` packages.

No systemd: `munged`, `slurmctld` and `slurmd -N localhost` are started directly with a private
`slurm.conf` (passed to every command through `SLURM_CONF`), and torn down by PID. There is no
accounting daemon, so clients must use `squeue` for job status. The node advertises `gpus` fake GPUs
as a GRES backed by plain files, so Slurm accepts `--gpus=N` and schedules by it; the jobs see
no CUDA device and run on the CPU.

Usage: `with SlurmCluster(tmp_path) as cluster: subprocess.run([...], env=cluster.env)`.
Run as a script to keep a cluster up by hand: `python tests/slurm_cluster.py /tmp/slurm`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REQUIRED_PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scontrol")


def missing_programs() -> list[str]:
    """Names of the Slurm/munge programs not on PATH (or in /usr/sbin)."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    return [name for name in REQUIRED_PROGRAMS if shutil.which(name, path=path) is None]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def slurm_conf(root: Path, *, cpus: int, memory_mb: int, gpus: int) -> str:
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    return f"""\
ClusterName=bertology-test
SlurmctldHost=localhost
# free ports, so a leftover or real cluster on this machine is never touched
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
KillWait=5
OverTimeLimit=0
AccountingStorageType=accounting_storage/none
ReturnToService=2
# squeue must still see a finished job for a while: the executor polls it for the final state, and the
# test reads every job of the run back with scontrol (a slow, shared machine can take over 10 minutes)
MinJobAge=7200
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
GresTypes=gpu
NodeName=localhost CPUs={cpus} RealMemory={memory_mb}{gres} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=1000
"""


class SlurmCluster:
    """Start munge + slurmctld + slurmd under `root`; stop them (by PID) on exit."""

    def __init__(self, root: Path, *, cpus: int | None = None, memory_mb: int = 8000, gpus: int = 2):
        self.root = Path(root).resolve()
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb
        self.gpus = gpus
        self.processes: list[subprocess.Popen] = []
        self.env = dict(os.environ)

    def _start(self, *command: str) -> subprocess.Popen:
        # -D keeps each daemon in the foreground, so its PID is ours to kill
        log = open(self.root / f"{Path(command[0]).name}.out", "wb")
        process = subprocess.Popen(
            list(command), env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append(process)
        return process

    def __enter__(self) -> "SlurmCluster":
        missing = missing_programs()
        if missing:
            raise RuntimeError(f"Slurm/munge programs missing: {missing}; apt-get install slurm-wlm munge")
        for sub in ("state", "spool", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        conf = self.root / "slurm.conf"
        conf.write_text(slurm_conf(self.root, cpus=self.cpus, memory_mb=self.memory_mb, gpus=self.gpus))
        if self.gpus:
            # Slurm only needs the device files to exist; these are plain files, not GPUs
            devices = self.root / "dev"
            devices.mkdir(exist_ok=True)
            for index in range(self.gpus):
                (devices / f"nvidia{index}").touch()
            (self.root / "gres.conf").write_text(
                f"NodeName=localhost Name=gpu File={devices}/nvidia[0-{self.gpus - 1}]\n"
            )
        munge_socket = self.root / "munge" / "munge.socket"
        self.env.update(SLURM_CONF=str(conf))
        # Real sites keep slurm.conf where every command finds it (/etc/slurm or configless). Ours is
        # private and named by SLURM_CONF, which the executor's job step drops (it strips SLURM_*
        # before its inner srun), so an srun shim first on PATH puts it back.
        shims = self.root / "bin"
        shims.mkdir(exist_ok=True)
        real_srun = shutil.which("srun") or "/usr/bin/srun"
        (shims / "srun").write_text(f'#!/bin/sh\nSLURM_CONF="{conf}" exec {real_srun} "$@"\n')
        (shims / "srun").chmod(0o755)
        self.env["PATH"] = f"{shims}:{self.env.get('PATH', '')}:/usr/sbin:/sbin"
        try:
            self._start(
                "munged", "--foreground", "--force", f"--socket={munge_socket}",
                f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                f"--log-file={self.root / 'munge' / 'munged.log'}",
                f"--seed-file={self.root / 'munge' / 'munged.seed'}",
            )
            self._wait_for(munge_socket.exists, "munged socket")
            # Slurm's auth/munge plugin reads the socket path from AuthInfo
            with conf.open("a") as handle:
                handle.write(f"AuthInfo=socket={munge_socket}\n")
            self._start("slurmctld", "-D", "-i", "-f", str(conf))
            self._start("slurmd", "-D", "-N", "localhost", "-f", str(conf))
            self._wait_for(self._node_idle, "slurm node to become idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _node_idle(self) -> bool:
        result = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%t"], env=self.env, capture_output=True, text=True
        )
        return result.returncode == 0 and result.stdout.strip().startswith("idle")

    def _wait_for(self, condition, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args[0]} exited ({process.returncode}) while waiting for {what}; "
                                       f"logs in {self.root}")
            time.sleep(0.2)
        raise TimeoutError(f"timed out waiting for {what}; logs in {self.root}")

    def stop(self) -> None:
        """Kill every daemon we started (and its process group: slurmd's job steps), newest first."""
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self.processes.clear()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so `with` tears the daemons down
    with SlurmCluster(Path(sys.argv[1])) as cluster:
        print(f"export SLURM_CONF={cluster.env['SLURM_CONF']}  # Ctrl-C to stop", flush=True)
        try:
            signal.pause()
        except (KeyboardInterrupt, SystemExit):
            pass
