"""cuda_library: .cu sources compiled by the toolkit's nvcc into a cc_library.

Bazel 4.2.3 has no CUDA rules offline, so each .cu file becomes one genrule
running /usr/local/cuda/bin/nvcc (gcc as host compiler, position-independent
code, SASS for the H100 and PTX for anything newer than Turing) and the
objects are linked like any C++ object. Headers a .cu includes must be in
`hdrs` (its own) or `cuda_hdrs` (others'); they are found from the execroot.
"""

_NVCC = "/usr/local/cuda/bin/nvcc"
_NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O2",
    "-ccbin /usr/bin/gcc",
    "-Xcompiler -fPIC",
    "-Xcompiler -Wall",
    "-Werror all-warnings",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_75,code=compute_75",
    "-I.",
    "-Ithird_party/cuda/include",
])

def cuda_library(name, srcs, hdrs = [], cuda_hdrs = [], deps = [], **kwargs):
    objects = []
    for src in srcs:
        stem = src.rsplit("/", 1)[-1].replace(".cu", "")
        out = "_nvcc/%s/%s.o" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [out],
            cmd = "%s %s -c $(location %s) -o $@" % (_NVCC, _NVCC_FLAGS, src),
            message = "nvcc " + src,
        )
        objects.append(out)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_nccl"],
        linkstatic = True,
        **kwargs
    )
