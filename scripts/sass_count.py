#!/usr/bin/env python3
"""Static SASS of the CUDA kernels, without a GPU: per kernel, the registers,
the instruction count and its most frequent opcodes, and with --unit-loop the
size of the streamed matmul's loop over stage units (the innermost backward
branch whose body waits on a stage and issues MMAs). A kernel that is bound by
its own instruction issue gets faster as these counts fall. Each count names
its object file, so a change's before and after come from two builds.

  python3 scripts/sass_count.py build-cuda/CMakeFiles/nextn_cuda.dir/src/backend/cuda/gdn.cu.o --match gdn_step
  python3 scripts/sass_count.py .../matmul_stream.cu.o --match 'stream_kernelILi0ELi1E' --unit-loop

cuobjdump (and the nvdisasm it runs) come with the CUDA toolkit; where the
toolkit has neither (nvcc alone), `pip install nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm` puts both under the packages' nvidia/cu*/bin/, which
this script also searches.
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig


def cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    for root in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for path in glob.glob(os.path.join(root, "nvidia", "cu*", "bin", "cuobjdump")):
            return path
    sys.exit("error: cuobjdump: not on PATH and no nvidia-cuda-cuobjdump package "
             "(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")


def run(tool, *args):
    """cuobjdump's output; the nvdisasm beside it found too."""
    env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run([tool, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"error: cuobjdump {' '.join(args)}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return done.stdout


def opcode(text):
    text = re.sub(r"^@!?U?P\w+\s+", "", text)  # the predicate guard
    return text.split()[0].split(".")[0]


def functions(tool, obj):
    out = run(tool, "-sass", obj)
    funcs, cur = collections.OrderedDict(), None
    for line in out.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and cur:
            funcs[cur].append((int(m.group(1), 16), m.group(2).strip()))
    return funcs


def registers(tool, obj):
    out = run(tool, "-res-usage", obj)
    regs, cur = {}, None
    for line in out.splitlines():
        m = re.search(r"Function (\S+):", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"REG:(\d+)", line)
        if m and cur:
            regs[cur] = int(m.group(1))
    return regs


def unit_loop(ins):
    """The smallest backward branch's body that waits on a stage (TRYWAIT) and holds MMAs."""
    best = None
    for addr, text in ins:
        m = re.search(r"BRA (0x[0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
        if any("TRYWAIT" in t for t in body) and sum("MMA" in t for t in body) >= 4:
            if best is None or len(body) < len(best):
                best = body
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object", help="an nvcc object (.cu.o) or an executable with device code")
    ap.add_argument("--match", default="", help="a regular expression on the mangled kernel name")
    ap.add_argument("--unit-loop", action="store_true", help="also the streamed matmul's unit loop")
    args = ap.parse_args()
    if not os.path.isfile(args.object):
        sys.exit(f"error: {args.object}: no such file")
    tool = cuobjdump()
    regs = registers(tool, args.object)
    for name, ins in functions(tool, args.object).items():
        if not re.search(args.match, name):
            continue
        ops = collections.Counter(opcode(t) for _, t in ins)
        top = " ".join(f"{k}:{v}" for k, v in ops.most_common(8))
        line = f"{len(ins):6d} instr  {regs.get(name, 0):3d} reg  {name}\n        {top}"
        if args.unit_loop:
            body = unit_loop(ins)
            if body:
                mma = sum("MMA" in t for t in body)
                line += f"\n        unit loop: {len(body)} instructions, {mma} MMA"
        print(line)


if __name__ == "__main__":
    main()
