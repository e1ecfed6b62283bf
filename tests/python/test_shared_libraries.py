"""The host loads exactly one CUDA runtime and one libnccl: the ones the
torch wheel ships (docs/dependencies.md). Two copies of either in one
process break NCCL communicators and CUDA contexts in ways that only show
on a GPU machine, so this is checked here, where there is none."""
import os
import re
import stat
import subprocess
import tempfile
import time
import unittest

from accel_testing import ACCEL_HOST

import torch


def loaded_libraries(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"^\s*(\S+) => (\S+)", out, re.M)}


class OneCudaRuntimeOneNccl(unittest.TestCase):
    def setUp(self):
        self.libs = loaded_libraries(ACCEL_HOST)
        self.wheel_dir = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), ".."))
        if not torch.version.cuda:
            self.skipTest("CPU-only torch wheel: no CUDA libraries to check")

    def only_one(self, prefix):
        found = {name: path for name, path in self.libs.items() if name.startswith(prefix)}
        self.assertEqual(len(found), 1, f"{prefix}: {found}")
        (path,) = found.values()
        self.assertTrue(os.path.realpath(path).startswith(self.wheel_dir), f"{path} is not the torch wheel's")
        return path

    def test_single_cuda_runtime_from_the_wheel(self):
        self.only_one("libcudart.so")

    def test_single_nccl_from_the_wheel(self):
        self.only_one("libnccl.so")

    def test_nothing_unresolved(self):
        out = subprocess.run(["ldd", ACCEL_HOST], capture_output=True, text=True).stdout
        self.assertNotIn("not found", out)

    def test_torch_cuda_is_not_linked_and_not_loaded_without_a_gpu(self):
        # libtorch_cuda.so and the CUDA libraries behind it load on demand
        # (host/comm/cuda_backend.h): never linked, and a run on a machine
        # without a GPU (this one) never loads them, not even with --device
        # auto, which asks the CUDA runtime first.
        for name in self.libs:
            self.assertFalse(name.startswith(("libtorch_cuda", "libcublas", "libcudnn", "libtorch.so")), name)
        if torch.cuda.is_available():
            self.skipTest("a GPU is visible: the backend loads here, as it should")
        env = dict(os.environ, LD_DEBUG="files")
        run = subprocess.run([ACCEL_HOST, "--model", "gpt-tiny", "--steps", "1", "--batch-size", "2", "--seq-len", "16",
                              "--device", "auto", "--log-every", "1"], capture_output=True, text=True, env=env,
                             timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        loaded = re.findall(r"file=(\S+)", run.stderr)
        self.assertTrue(any("libtorch_cpu" in f for f in loaded), "LD_DEBUG listed no libraries")
        self.assertFalse([f for f in loaded if "libtorch_cuda" in f or "libcublas" in f], "CUDA libraries loaded")

    def test_toolkit_nccl_header_matches_the_runtime_library(self):
        header = "/usr/local/cuda/include/nccl.h"
        if not os.path.exists(header):
            self.skipTest("no CUDA toolkit NCCL header on this machine")
        text = open(header).read()
        version = tuple(int(re.search(rf"#define NCCL_{k} (\d+)", text).group(1)) for k in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(version, torch.cuda.nccl.version(),
                         "the NCCL backend compiles against the toolkit header but runs the wheel's library")


if __name__ == "__main__":
    unittest.main()


class EverySymbolIsBoundAtLoad(unittest.TestCase):
    """accel-host starts itself again with LD_BIND_NOW (host/app/bind_now.cpp):
    Open MPI's progress thread must not resolve a symbol lazily while MPI_Init
    opens and closes components on the main thread (a SIGSEGV in ld.so)."""

    def bindings_after_start(self, env):
        run = subprocess.run([ACCEL_HOST, "--help"], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        trace = run.stderr
        self.assertIn("transferring control", trace)
        after = trace[trace.rindex("transferring control"):]
        return re.findall(r"binding file (\S+) \[", after)

    def test_mpi_and_the_host_resolve_nothing_lazily(self):
        late = self.bindings_after_start(dict(os.environ, LD_DEBUG="bindings"))
        # A library's own references bound after start are lazy bindings
        # (what dlopen binds is recorded under the opened library's name).
        lazy = sorted({f for f in late if re.search(r"libopen-pal|libmpi\.so|libtorch_cpu", f)})
        self.assertEqual(lazy, [], "bound on first call, after the program started")

    def test_an_empty_ld_bind_now_is_replaced(self):
        late = self.bindings_after_start(dict(os.environ, LD_DEBUG="bindings", LD_BIND_NOW=""))
        self.assertNotIn("libopen-pal", " ".join(late))

    def test_what_accel_host_starts_loads_as_the_user_said(self):
        # srun dlopens Slurm plugins that resolve only lazily: LD_BIND_NOW
        # must not reach the programs accel-host starts unless the user set it.
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "mpirun")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\nenv > \"$(dirname \"$0\")/env.txt\"\n")
            os.chmod(fake, stat.S_IRWXU)
            for user_value, expected in ((None, None), ("1", "1")):
                env = dict(os.environ, PATH=tmp + os.pathsep + os.environ["PATH"])
                env.pop("LD_BIND_NOW", None)
                if user_value:
                    env["LD_BIND_NOW"] = user_value
                run = subprocess.run([ACCEL_HOST, "launch", "--num_processes", "2", "--", "--model", "gpt-tiny"],
                                     capture_output=True, text=True, env=env, timeout=60)
                self.assertEqual(run.returncode, 0, run.stderr[-2000:])
                with open(os.path.join(tmp, "env.txt")) as f:
                    seen = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
                self.assertEqual(seen.get("LD_BIND_NOW"), expected, user_value)
                self.assertNotIn("ACCEL_STARTED_BOUND_NOW", seen)

    def test_the_process_keeps_its_name(self):
        # ps, pkill and the multinode test find ranks by their name: the
        # second start runs the file's own path, not /proc/self/exe ("exe").
        proc = subprocess.Popen([ACCEL_HOST, "--model", "gpt-tiny", "--steps", "100000", "--log-level", "warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            name = ""
            while time.monotonic() < deadline:
                with open(f"/proc/{proc.pid}/environ", "rb") as f:
                    started_again = b"ACCEL_STARTED_BOUND_NOW=1" in f.read()
                with open(f"/proc/{proc.pid}/comm") as f:
                    name = f.read().strip()
                if started_again:
                    break
                time.sleep(0.05)
            self.assertTrue(started_again, "the second start never came")
            self.assertEqual(name, os.path.basename(ACCEL_HOST))
        finally:
            proc.kill()
            proc.wait()
