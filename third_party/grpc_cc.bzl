"""C++ protobuf + gRPC code generation with Debian's protoc and grpc_cpp_plugin.

The build is offline, so instead of rules_proto/grpc's Bazel rules we run the
system compilers (protobuf 3.21, gRPC 1.51 — the versions the system libraries
in //third_party:protobuf and //third_party:grpc were built with, so generated
code and runtime always agree).

    load("//third_party:grpc_cc.bzl", "summon_cc_grpc_library")

    summon_cc_grpc_library(
        name = "summon_v1",
        srcs = ["summon/v1/summon.proto"],
        deps = [":summon_types"],
    )

The calling package is the proto root: "summon/v1/summon.proto" in //proto is
the descriptor file name other .proto files import, and C++ includes the
generated "summon/v1/summon.pb.h" and "summon/v1/summon.grpc.pb.h".
"""

_PROTOC = "/usr/bin/protoc"
_GRPC_PLUGIN = "/usr/bin/grpc_cpp_plugin"

def _strip_proto(src):
    if not src.endswith(".proto"):
        fail("summon_cc_grpc_library: %s is not a .proto file" % src)
    return src[:-len(".proto")]

def _package_of(label):
    """The package directory of a dependency given as ":x" or "//pkg:x"."""
    if label.startswith(":"):
        return native.package_name()
    if label.startswith("//"):
        return label[2:].split(":")[0]
    fail("summon_cc_grpc_library: use ':name' or '//pkg:name' labels, got " + label)

def _unique(labels):
    result = []
    for label in labels:
        if label not in result:
            result.append(label)
    return result

def summon_cc_grpc_library(
        name,
        srcs,
        deps = [],
        compiled_in = None,
        alwayslink = False,
        visibility = None):
    """Generates and compiles the messages and gRPC stubs of `srcs`.

    Args:
      name: the cc_library to depend on. `name + "_protos"` is a filegroup of
        the .proto files (with those of `deps`) for importers.
      srcs: .proto files of this package, relative to it.
      deps: other summon_cc_grpc_library targets whose .proto files `srcs`
        import.
      compiled_in: a library that already contains the compiled generated code
        (e.g. libgrpc++_reflection for the reflection API). Only the headers
        are generated then: compiling the .pb.cc a second time would register
        the same descriptors twice and abort the program at start-up.
      alwayslink: link the generated code into binaries even when nothing
        refers to it, so that its descriptors are registered (reflection can
        describe a service served without these C++ classes).
      visibility: as usual.
    """
    stems = [_strip_proto(src) for src in srcs]
    headers = [s + ".pb.h" for s in stems] + [s + ".grpc.pb.h" for s in stems]
    sources = [s + ".pb.cc" for s in stems] + [s + ".grpc.pb.cc" for s in stems]

    native.filegroup(
        name = name + "_protos",
        srcs = srcs + [dep + "_protos" for dep in deps],
        visibility = visibility,
    )

    roots = [native.package_name()]
    for dep in deps:
        root = _package_of(dep)
        if root not in roots:
            roots.append(root)

    native.genrule(
        name = name + "_codegen",
        srcs = srcs + [dep + "_protos" for dep in deps],
        outs = headers + sources,
        cmd = " ".join(
            [_PROTOC] +
            ["-I" + (root if root else ".") for root in roots] +
            [
                "--cpp_out=$(RULEDIR)",
                "--grpc_out=$(RULEDIR)",
                "--plugin=protoc-gen-grpc=" + _GRPC_PLUGIN,
            ] +
            ["$(location %s)" % src for src in srcs],
        ),
        message = "protoc " + " ".join(srcs),
        visibility = ["//visibility:private"],
    )

    native.cc_library(
        name = name,
        # Generated code is not ours to keep warning-free: no SUMMON_COPTS.
        srcs = [] if compiled_in else sources,
        hdrs = headers,
        # The package is the include root of the generated headers; "includes"
        # makes them system headers for dependents, so -Werror code that
        # includes them is not held to their warnings either.
        includes = ["."],
        deps = _unique(deps + [
            "//third_party:grpc",
            "//third_party:protobuf",
        ] + ([compiled_in] if compiled_in else [])),
        alwayslink = alwayslink,
        visibility = visibility,
    )
