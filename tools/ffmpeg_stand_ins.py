#!/usr/bin/env python3
"""Stand-ins for the FFmpeg libraries a bundled binary names, for GPU machines without FFmpeg 5.1.

`train` links Debian 12's FFmpeg (libavcodec.so.59, …); the GPU machines' image has another FFmpeg
or none, and the real libraries' dependency closure (≈ 200 MB: x264, x265, dav1d, …) does not fit
in a device run. The GPU check's training reads frame folders (PNG), which never reach FFmpeg, so
each library is replaced by one of the same soname and symbol versions whose functions stop the
process with a message naming the function. A video file given to such a binary ends in that
message, not in a wrong result.

Usage: ffmpeg_stand_ins.py OUT_DIR BINARY...   (writes OUT_DIR/libavcodec.so.59 etc.)
"""
import collections
import pathlib
import re
import subprocess
import sys
import tempfile

# `objdump -T`: "... DF *UND* ... (LIBAVCODEC_59) avcodec_open2"
IMPORT = re.compile(r"\*UND\*.*\((LIB(?:AV|SW)[A-Z]+_\d+)\)\s+(\w+)$")


def imports(binaries):
    """version node → the function names the binaries import from it."""
    found = collections.defaultdict(set)
    for binary in binaries:
        table = subprocess.run(["objdump", "-T", binary], check=True, capture_output=True, text=True).stdout
        for line in table.splitlines():
            match = IMPORT.search(line)
            if match:
                if " DF " not in line:
                    sys.exit(f"{binary}: {match.group(2)} is data, not a function: a stand-in cannot supply it")
                found[match.group(1)].add(match.group(2))
    return found


def soname(node):
    """LIBAVCODEC_59 → libavcodec.so.59 (FFmpeg names its version nodes after its sonames)."""
    name, major = node.rsplit("_", 1)
    return f"{name.lower()}.so.{major}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    nodes = imports(sys.argv[2:])
    if not nodes:
        print("no FFmpeg imports: no stand-ins needed")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for node, functions in sorted(nodes.items()):
            source = pathlib.Path(tmp, f"{node}.c")
            body = ['#include <stdio.h>', '#include <stdlib.h>',
                    'static void missing(const char *name) {',
                    '  fprintf(stderr, "%s: FFmpeg is not in this bundle (give frame folders, not video files)\\n", name);',
                    '  abort();', '}']
            body += [f'void {f}(void) {{ missing("{f}"); }}' for f in sorted(functions)]
            source.write_text("\n".join(body) + "\n")
            script = pathlib.Path(tmp, f"{node}.map")
            script.write_text(f"{node} {{ global: {'; '.join(sorted(functions))}; local: *; }};\n")
            target = out / soname(node)
            subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-Wl,-soname,{target.name}",
                            f"-Wl,--version-script={script}", "-o", str(target), str(source)], check=True)
            print(f"{target.name}: {len(functions)} functions")


if __name__ == "__main__":
    main()
