#!/usr/bin/env python3
"""Write kiln's bad-input suite: tests/bad_inputs/*.{onnx,npy,safetensors,bin}
and the manifest tests/bad_inputs/cases.txt.

Every file is malformed, truncated or hostile in exactly one way. For each,
`kiln <args>` must fail with exit code 2 and one error line that names the file
and says what is wrong; tests/bad_inputs/check.sh runs the manifest. A manifest
line is

    <kiln args, relative to tests/bad_inputs> | <expected substring of the error line>

The files are tiny on purpose: a hostile file is one that *claims* to be big
(huge dims, offsets past the end), and the test is that kiln believes the claim
only after checking it against what is really there.

It also writes the fuzzers' seed corpora, fuzz/corpus/<target>/: every bad
file of the target's format, a few valid ones, and tiny models and tensors from
the ONNX backend node tests (Debian's libonnx-testdata).

Deterministic: running the script twice writes identical bytes. The output
folders are emptied first (tests/bad_inputs/ keeps check.sh). Regenerate with
    /usr/bin/python3 tools/make_bad_inputs.py
Needs onnx and numpy (Debian's python3-onnx, python3-numpy); nothing else.
"""
import argparse
import sys
import tempfile
import json
import os
import re
import shutil
import struct

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


# ---------------------------------------------------------------- builders

def model(nodes, inputs, outputs, initializers=(), opset=OPSET, extra_opsets=()):
    """A ModelProto from plain parts. No onnx.checker: most of these files
    are invalid on purpose, and the checker would refuse to write them."""
    graph = helper.make_graph(list(nodes), "bad", list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(graph, opset_imports=opsets, producer_name="make_bad_inputs")
    m.ir_version = 8
    return m


def vinfo(name, elem_type=FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem_type, shape)


def raw_tensor(name, dims, data_type=FLOAT, raw=b""):
    """A TensorProto written field by field, so dims and data may disagree."""
    t = TensorProto()
    t.name = name
    t.data_type = data_type
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def const_tensor(name, array):
    """A well-formed initializer from a numpy array."""
    return numpy_helper.from_array(np.asarray(array), name)


def external_tensor(name, dims, location, offset=None, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            e = t.external_data.add()
            e.key, e.value = key, str(value)
    return t


def relu_model():
    """The valid model the .npy cases feed: y = Relu(x), x float [2, 3]."""
    return model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x")], [vinfo("y")])


def add_weight_model(w):
    """y = x + w for a float input x [2, 3] and an initializer w."""
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [vinfo("x")], [vinfo("y", shape=None)], [w])


def npy_bytes(descr, shape, data=b"", fortran="False", magic=b"\x93NUMPY", version=(1, 0)):
    """A .npy file with an arbitrary header, padded as numpy pads it."""
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return magic + bytes(version) + struct.pack("<H", len(header)) + header.encode() + data


def safetensors_bytes(header, data=b"", header_len=None):
    """A safetensors file: u64 header length, JSON header, data section.
    `header` is a dict (serialized) or raw bytes; `header_len` can lie."""
    text = header if isinstance(header, bytes) else json.dumps(header, sort_keys=True).encode()
    n = len(text) if header_len is None else header_len
    return struct.pack("<Q", n) + text + data


def serialize(m):
    return m.SerializeToString()


# ---------------------------------------------------------------- the cases

# (file name, bytes) pairs written before the manifest; side files included.
FILES = []
# (kiln args, expected substring of the error line, why the file is bad).
CASES = []


class Symlink(str):
    """A file to write as a symbolic link to this (relative) target."""


def add_file(name, data):
    if data is not None:  # None: the file another case wrote
        FILES.append((name, data))


def case(args, expect, why):
    CASES.append((args, expect, why))


def onnx_case(name, m_or_bytes, expect, why):
    add_file(name, m_or_bytes if isinstance(m_or_bytes, bytes) else serialize(m_or_bytes))
    case(f"run {name}", f"{name}: {expect}", why)


def build_cases():
    valid = serialize(relu_model())
    add_file("relu.onnx", valid)

    # --- ONNX: the container itself
    onnx_case("empty.onnx", b"", "not a valid ONNX model (no graph)",
              "zero bytes: parses as an empty ModelProto")
    # A varint whose continuation bit never ends, then garbage: protobuf rejects it.
    onnx_case("not_protobuf.onnx", b"\xff" * 16 + b"this is not an ONNX model\n",
              "not a valid ONNX model (protobuf parse failed)", "random bytes, not protobuf")
    onnx_case("truncated.onnx", valid[: len(valid) // 2],
              "not a valid ONNX model (protobuf parse failed)", "a valid model cut in half")
    m = relu_model()
    m.ClearField("graph")
    onnx_case("no_graph.onnx", m, "not a valid ONNX model (no graph)",
              "a ModelProto with opsets but no graph")
    onnx_case("opset99.onnx",
              model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x")], [vinfo("y")], opset=99),
              "opset 99 is not supported", "default-domain opset from the future")

    # --- ONNX: ops
    onnx_case("unknown_op.onnx",
              model([helper.make_node("FrobnicateV2", ["x"], ["y"], name="frob")], [vinfo("x")], [vinfo("y")]),
              "node 'frob' (FrobnicateV2): unknown op 'FrobnicateV2'", "op kiln has never heard of")
    onnx_case("foreign_domain.onnx",
              model([helper.make_node("FusedGelu", ["x"], ["y"], name="gelu", domain="com.microsoft")],
                    [vinfo("x")], [vinfo("y")], extra_opsets=[("com.microsoft", 1)]),
              "node 'gelu' (FusedGelu): op domain 'com.microsoft' is not supported", "op from a vendor domain")

    # --- ONNX: values and graph structure
    onnx_case("string_input.onnx",
              model([helper.make_node("Identity", ["s"], ["y"])], [vinfo("s", TensorProto.STRING, (2,))],
                    [vinfo("y", TensorProto.STRING, (2,))]),
              "input 's': element type STRING is not supported", "graph input of dtype string")
    onnx_case("input_negative_dim.onnx",
              model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x", shape=(2, -3))], [vinfo("y")]),
              "input 'x': negative dimension -3", "graph input declared with a negative dim")
    onnx_case("undefined_input.onnx",
              model([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], [vinfo("x")], [vinfo("y")]),
              "node 'add' (Add): input 'ghost' is not defined", "node reads a value nobody defines")
    onnx_case("duplicate_output.onnx",
              model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                     helper.make_node("Neg", ["x"], ["y"], name="second")], [vinfo("x")], [vinfo("y")]),
              "node 'second' (Neg): output 'y' is defined twice", "two nodes produce the same value")
    # a = x + b, b = Relu(a): ONNX requires nodes in topological order, so the
    # importer meets 'b' before anything defines it.
    onnx_case("cycle.onnx",
              model([helper.make_node("Add", ["x", "b"], ["a"], name="add"),
                     helper.make_node("Relu", ["a"], ["b"], name="relu")], [vinfo("x")], [vinfo("b")]),
              "node 'add' (Add): input 'b' is produced by a later node", "two nodes feed each other")
    onnx_case("output_never_produced.onnx",
              model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x")], [vinfo("z")]),
              "graph output 'z' is never produced", "declared output no node writes")

    # --- ONNX: nodes with the wrong number of inputs or outputs (checked
    # against op_table.def's counts before any op's inference runs).
    onnx_case("missing_input.onnx",
              model([helper.make_node("Softmax", [], ["y"], name="sm")], [vinfo("x")], [vinfo("y")]),
              "node 'sm' (Softmax): has 0 inputs, expected 1", "a required input not given")
    onnx_case("omitted_input.onnx",
              model([helper.make_node("Softmax", [""], ["y"], name="sm")], [vinfo("x")], [vinfo("y")]),
              "node 'sm' (Softmax): required input 0 is missing", "a required input given as '' (omitted)")
    onnx_case("extra_outputs.onnx",
              model([helper.make_node("ReduceMean", ["x"], ["y", "y2", "y3"], name="mean")], [vinfo("x")],
                    [vinfo("y")]),
              "node 'mean' (ReduceMean): has 3 outputs, expected 1", "three outputs from a one-output op")
    onnx_case("no_outputs.onnx",
              model([helper.make_node("ReduceSum", ["x"], [], name="sum"),
                     helper.make_node("Relu", ["x"], ["y"])], [vinfo("x")], [vinfo("y")]),
              "node 'sum' (ReduceSum): has 0 outputs, expected 1", "a node with no outputs")

    # --- ONNX: initializers
    onnx_case("raw_data_size.onnx",
              add_weight_model(raw_tensor("w", [2, 3], raw=b"\0" * 8)),
              "initializer 'w': raw_data has 8 bytes, shape [2,3] of f32 needs 24",
              "raw_data shorter than dims say")
    onnx_case("negative_dim.onnx",
              add_weight_model(raw_tensor("w", [-1, 3], raw=b"\0" * 12)),
              "initializer 'w': negative dimension -1", "initializer dim below zero")
    onnx_case("dims_overflow.onnx",
              add_weight_model(raw_tensor("w", [2**40, 2**40], raw=b"\0" * 4)),
              "initializer 'w': shape [1099511627776,1099511627776] has more than 2^40 elements",
              "dims whose product overflows int64")
    # Typed data (float_data) instead of raw_data: the count must be checked
    # before a buffer of the claimed size is allocated (2^31 floats = 8 GB).
    t = TensorProto()
    t.name, t.data_type = "w", FLOAT
    t.dims.extend([2**31])
    t.float_data.extend([1.0])
    onnx_case("float_data_count.onnx", add_weight_model(t),
              "initializer 'w': float_data has 1 values, shape needs 2147483648",
              "8 GB claimed, 4 bytes present")
    t = TensorProto()
    t.name, t.data_type = "w", 1234
    t.dims.extend([1])
    t.raw_data = b"\0" * 4
    onnx_case("bad_dtype.onnx", add_weight_model(t), "initializer 'w': invalid element type 1234",
              "data_type not in the enum")

    # --- ONNX: external data. The side file is 64 bytes: 16 floats.
    add_file("ext_data.bin", np.arange(16, dtype="<f4").tobytes())
    onnx_case("ext_offset_past_end.onnx",
              add_weight_model(external_tensor("w", [2, 3], "ext_data.bin", offset=4096)),
              "initializer 'w': external data [4096, 4120) lies past the end of 'ext_data.bin' (64 bytes)",
              "offset beyond the side file")
    onnx_case("ext_size_past_end.onnx",
              add_weight_model(external_tensor("w", [2, 3, 4], "ext_data.bin", offset=0)),
              "initializer 'w': external data [0, 96) lies past the end of 'ext_data.bin' (64 bytes)",
              "offset inside, but the data runs past the end")
    onnx_case("ext_huge_offset.onnx",
              add_weight_model(external_tensor("w", [2, 3], "ext_data.bin", offset=2**64 - 8)),
              "initializer 'w': '18446744073709551608' is not a valid external data offset/length",
              "offset near 2^64, where offset + size would wrap")
    onnx_case("ext_length_mismatch.onnx",
              add_weight_model(external_tensor("w", [2, 3], "ext_data.bin", length=12)),
              "initializer 'w': external data length 12 does not match shape [2,3] (24 bytes)",
              "length key disagrees with dims")
    onnx_case("ext_escape.onnx",
              add_weight_model(external_tensor("w", [2, 3], "../bad_inputs/ext_data.bin")),
              "initializer 'w': external data location '../bad_inputs/ext_data.bin' leaves the model folder",
              "location climbs out of the model folder (the file does exist)")
    onnx_case("ext_absolute.onnx",
              add_weight_model(external_tensor("w", [2, 3], "/etc/passwd")),
              "initializer 'w': external data location '/etc/passwd' must be a relative path",
              "absolute location")
    onnx_case("ext_missing.onnx",
              add_weight_model(external_tensor("w", [2, 3], "no_such_weights.bin")),
              "initializer 'w': external data: ./no_such_weights.bin: no such file", "side file does not exist")

    # --- ONNX: shapes (messages come from shape inference in src/ir/infer/)
    onnx_case("matmul_mismatch.onnx",
              model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], [], [vinfo("y", shape=None)],
                    [const_tensor("a", np.zeros((2, 3), "f4")), const_tensor("b", np.zeros((4, 5), "f4"))]),
              "node 'mm' (MatMul): inner dims of A and B disagree: 3 vs 4", "[2,3] x [4,5]")
    onnx_case("add_broadcast_mismatch.onnx",
              model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vinfo("x")], [vinfo("y", shape=None)],
                    [const_tensor("w", np.zeros((4, 5), "f4"))]),
              "node 'add' (Add): shapes [2,3] and [4,5] do not broadcast", "[2,3] + [4,5]")
    onnx_case("reshape_mismatch.onnx",
              model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], [vinfo("x")],
                    [vinfo("y", shape=None)], [const_tensor("s", np.array([4, 5], "i8"))]),
              "node 'reshape' (Reshape): cannot reshape [2,3] (6 elements) to [4,5]", "6 elements reshaped to 20")
    # Declared dims that are each fine but multiply past int64: inference must
    # not overflow computing Reshape's element count.
    onnx_case("input_dims_overflow.onnx",
              model([helper.make_node("Reshape", ["x", "s"], ["y"], name="flatten")],
                    [vinfo("x", shape=(2**40, 2**40))], [vinfo("y", shape=None)],
                    [const_tensor("s", np.array([-1], "i8"))]),
              "input 'x': shape [1099511627776,1099511627776] has more than 2^40 elements",
              "input [2^40, 2^40] flattened")
    # The same for a scalar check: Range's start must have one element.
    onnx_case("range_dims_overflow.onnx",
              model([helper.make_node("Range", ["x", "s", "s"], ["y"], name="range")],
                    [vinfo("x", shape=(2**40, 2**40)), vinfo("s", shape=())], [vinfo("y", shape=None)]),
              "input 'x': shape [1099511627776,1099511627776] has more than 2^40 elements",
              "a [2^40, 2^40] start")
    onnx_case("constant_of_shape_overflow.onnx",
              model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], [], [vinfo("y", shape=None)],
                    [const_tensor("s", np.array([2**20, 2**20, 2**20], "i8"))]),
              "node 'fill' (ConstantOfShape): shape [1048576,1048576,1048576] has more than 2^40 elements",
              "2^60 elements requested by a 109-byte file")
    onnx_case("constant_of_shape_huge.onnx",
              model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], [], [vinfo("y", shape=None)],
                    [const_tensor("s", np.array([2**38], "i8"))]),
              "node 'fill' (ConstantOfShape): cannot allocate 1099511627776 bytes for a tensor of shape "
              "[274877906944]", "1 TB of zeros: under 2^40 elements, far past memory")

    # --- .npy inputs, fed to relu.onnx (x: float [2, 3])
    def npy_case(name, data, expect, why):
        add_file(name, data)
        case(f"run relu.onnx --input x={name}", f"{name}: {expect}", why)

    good = np.arange(6, dtype="<f4").tobytes()
    npy_case("npy_bad_magic.npy", npy_bytes("<f4", (2, 3), good, magic=b"\x93NUMPX"),
             "not a .npy file (bad magic)", "magic string wrong")
    npy_case("npy_empty.npy", b"", "not a .npy file (bad magic)", "zero bytes")
    npy_case("npy_truncated_data.npy", npy_bytes("<f4", (2, 3), good[:10]),
             ".npy data is 10 bytes, shape [2,3] of f32 needs 24", "data cut short")
    npy_case("npy_truncated_header.npy", npy_bytes("<f4", (2, 3))[:40],
             "truncated .npy header", "header length points past the end")
    npy_case("npy_huge_shape.npy", npy_bytes("<f4", (2**40,)),
             ".npy data is 0 bytes, shape [1099511627776] of f32 needs 4398046511104",
             "header claims 4 TB, no data")
    npy_case("npy_shape_overflow.npy", npy_bytes("<f4", (2**40, 2**40)),
             "shape [1099511627776,1099511627776] has more than 2^40 elements", "shape product overflows int64")
    npy_case("npy_dim_digits.npy", npy_bytes("<f4", (10**30,)),
             "malformed .npy header: dimension too large", "a 31-digit dimension")
    npy_case("npy_fortran.npy", npy_bytes("<f4", (2, 3), good, fortran="True"),
             "Fortran-order .npy arrays are not supported", "column-major data")
    npy_case("npy_dtype.npy", npy_bytes("<c8", (2, 3), b"\0" * 48),
             ".npy dtype '<c8' is not supported", "complex64")
    npy_case("npy_big_endian.npy", npy_bytes(">f4", (2, 3), good),
             ".npy dtype '>f4' is not supported", "big-endian floats")
    npy_case("npy_version.npy", npy_bytes("<f4", (2, 3), good, version=(9, 0)),
             ".npy format version 9 is not supported", "format version from the future")
    # Valid files that do not fit relu.onnx's input x: float [2, 3].
    add_file("npy_wrong_shape.npy", npy_bytes("<f4", (3,), good[:12]))
    case("run relu.onnx --input x=npy_wrong_shape.npy",
         "relu.onnx: input 'x' (npy_wrong_shape.npy) must have shape [2,3], got [3]", "a [3] array for a [2,3] input")
    add_file("npy_wrong_dtype.npy", npy_bytes("<i8", (2, 3), b"\0" * 48))
    case("run relu.onnx --input x=npy_wrong_dtype.npy",
         "relu.onnx: input 'x' (npy_wrong_dtype.npy) must be f32, got i64", "int64 array for a float input")
    case("run relu.onnx --input x=npy_missing.npy", "npy_missing.npy: no such file", "no such file")

    # --- flags of the model-running commands
    case("run relu.onnx --mode bogus", "unknown mode 'bogus' (modes: eager, graph, auto)", "an unknown --mode")
    case("run relu.onnx --reference", "--reference runs the eager executor: add --mode eager",
         "an eager-only flag in graph mode")
    case("bench relu.onnx --iters 0", "--iters must be at least 1, got 0", "no timed runs")
    case("bench relu.onnx --modes eager,warp", "--modes: unknown mode 'warp'", "an unknown mode in --modes")
    case("bench relu.onnx --modes graph,graph", "--modes: 'graph' is listed twice", "a mode listed twice")
    case("bench truncated.onnx", "truncated.onnx: not a valid ONNX model (protobuf parse failed)",
         "bench on a malformed model")
    case("bench relu.onnx --input x=npy_wrong_shape.npy",
         "relu.onnx: input 'x' (npy_wrong_shape.npy) must have shape [2,3], got [3]", "bench with a wrong input")

    # --- the precision flags (--precision, --precision-policy FILE)
    case("run relu.onnx --precision fp8", "--precision: unknown precision 'fp8' (f32, bf16)", "an unknown precision")
    def policy_case(name, text, expect, why, command="run"):
        add_file(name, text.encode())
        case(f"{command} relu.onnx --precision-policy {name}", expect, why)
    policy_case("policy_not_json.json", '{"ops": ', "policy_not_json.json: a precision policy is a JSON object",
                "a policy file that is not JSON")
    policy_case("policy_bad_dtype.json", '{"default": "fp16"}',
                'policy_bad_dtype.json: "default": a precision is "f32" or "bf16", got "fp16"',
                "a policy naming a dtype kiln lacks")
    policy_case("policy_unknown_op.json", '{"ops": {"Convolution": "bf16"}}',
                "policy_unknown_op.json: \"ops\": unknown op 'Convolution'", "a policy naming an op that does not exist")
    policy_case("policy_no_bf16_kernel.json", '{"ops": {"Softmax": "bf16"}}',
                'policy_no_bf16_kernel.json: "ops": Softmax has no bf16 kernel', "bf16 for an op with no bf16 kernel",
                command="bench")
    policy_case("policy_unknown_key.json", '{"op": {"Conv": "f32"}}',
                'policy_unknown_key.json: "op": unknown key (default, ops, nodes)', "a misspelt key")
    policy_case("policy_unknown_node.json", '{"nodes": {"/no/such/node": "f32"}}',
                "the precision policy names node '/no/such/node', which the model does not have",
                "a policy naming a node the model lacks", command="show --optimize")

    # --- safetensors, given as MODEL: kiln validates the file, then says it
    # holds weights only. `kiln show` lists a weights file's tensors.
    def st_case(name, data, expect, why, command="run"):
        add_file(name, data)
        case(f"{command} {name}", f"{name}: {expect}", why)

    w = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
    st_case("weights.safetensors", safetensors_bytes(w, good),
            "holds tensors only, not a model; give an ONNX file", "a valid weights file is not a model")
    add_file("weights.npy", npy_bytes("<f4", (2, 3), good))
    case("run weights.npy", "weights.npy: holds tensors only, not a model; give an ONNX file",
         "a valid .npy file is not a model")
    st_case("st_header_len.safetensors", safetensors_bytes(w, good, header_len=2**40),
            "header length 1099511627776 exceeds the file", "header length past the end")
    st_case("st_bad_json.safetensors", safetensors_bytes(b'{"w": {"dtype": "F32", "shape": [2, 3', good),
            "header is not a JSON object", "header cut mid-JSON")
    st_case("st_offsets.safetensors",
            safetensors_bytes({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 4096]}}, good),
            "tensor 'w': data_offsets [0, 4096) lie outside the data section (24 bytes)",
            "data_offsets past the end")
    st_case("st_offsets_show.safetensors",
            safetensors_bytes({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 32]}}, good),
            "tensor 'w': data_offsets [8, 32) lie outside the data section (24 bytes)",
            "data_offsets past the end, listed with `kiln show`", command="show")
    st_case("st_size_mismatch.safetensors",
            safetensors_bytes({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}}, good),
            "tensor 'w': 16 bytes of data, shape [2,3] needs 24", "data_offsets disagree with shape")
    st_case("st_shape_overflow.safetensors",
            safetensors_bytes({"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 24]}}, good),
            "tensor 'w': shape [1099511627776,1099511627776] has more than 2^40 elements", "shape product overflows int64")
    st_case("st_overlap.safetensors",
            safetensors_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                               "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, good),
            "tensor data ranges overlap at offset 8", "two tensors share bytes")
    checkpoint_cases()


def checkpoint_file(tensors):
    """A safetensors file of {name: (dtype, shape)}, zero-filled, in name order."""
    sizes = {"F32": 4, "F16": 2, "I64": 8}
    header, offset = {}, 0
    for name, (dtype, shape) in sorted(tensors.items()):
        n = int(np.prod(shape)) * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    return safetensors_bytes(header, bytes(offset))


UNET = "model.diffusion_model."


def micro_sd_checkpoint():
    """The smallest SD 1.x single file kiln builds a UNet from (LDM keys, one
    level of 32 channels, one resnet a level, attention in the middle block):
    the fuzzers' seed for the checkpoint loaders."""
    t = {}

    def conv(name, cout, cin, k=3):
        t[f"{UNET}{name}.weight"] = ("F16", (cout, cin, k, k))
        t[f"{UNET}{name}.bias"] = ("F16", (cout,))

    def linear(name, cout, cin, bias=True):
        t[f"{UNET}{name}.weight"] = ("F16", (cout, cin))
        if bias:
            t[f"{UNET}{name}.bias"] = ("F16", (cout,))

    def norm(name, c):
        t[f"{UNET}{name}.weight"] = ("F16", (c,))
        t[f"{UNET}{name}.bias"] = ("F16", (c,))

    def resnet(name, cin, cout):
        norm(f"{name}.in_layers.0", cin)
        conv(f"{name}.in_layers.2", cout, cin)
        linear(f"{name}.emb_layers.1", cout, 128)
        norm(f"{name}.out_layers.0", cout)
        conv(f"{name}.out_layers.3", cout, cout)
        if cin != cout:
            conv(f"{name}.skip_connection", cout, cin, 1)

    conv("input_blocks.0.0", 32, 4)
    linear("time_embed.0", 128, 32)
    linear("time_embed.2", 128, 128)
    resnet("input_blocks.1.0", 32, 32)
    resnet("middle_block.0", 32, 32)
    a = "middle_block.1"
    norm(f"{a}.norm", 32)
    conv(f"{a}.proj_in", 32, 32, 1)
    conv(f"{a}.proj_out", 32, 32, 1)
    b = f"{a}.transformer_blocks.0"
    for n in ("norm1", "norm2", "norm3"):
        norm(f"{b}.{n}", 32)
    for attn in ("attn1", "attn2"):
        for p in ("to_q", "to_k", "to_v"):
            linear(f"{b}.{attn}.{p}", 32, 32, bias=False)
        linear(f"{b}.{attn}.to_out.0", 32, 32)
    linear(f"{b}.ff.net.0.proj", 256, 32)
    linear(f"{b}.ff.net.2", 32, 128)
    resnet("middle_block.2", 32, 32)
    resnet("output_blocks.0.0", 64, 32)
    resnet("output_blocks.1.0", 64, 32)
    norm("out.0", 32)
    conv("out.2", 4, 32)
    return t


def checkpoint_cases():
    """Single-file checkpoints and diffusers folders that are malformed in
    the ways real ones break: each must give one error line."""
    def ckpt_case(name, data, expect, why, command="run"):
        add_file(name, data)
        case(f"{command} {name}", expect, why)

    conv_in = {f"{UNET}input_blocks.0.0.weight": ("F16", (32, 4, 3, 3)),
               f"{UNET}input_blocks.0.0.bias": ("F16", (32,))}
    whole = checkpoint_file(conv_in)
    ckpt_case("ckpt_truncated.safetensors", whole[:len(whole) // 2 + 40],
              "ckpt_truncated.safetensors: tensor 'model.diffusion_model.input_blocks.0.0.weight': data_offsets",
              "a checkpoint cut short (its header intact)")
    lying = json.loads(whole[8:8 + struct.unpack("<Q", whole[:8])[0]])
    lying[f"{UNET}input_blocks.0.0.weight"]["data_offsets"] = [0, 32 * 4 * 3 * 3 * 2]
    ckpt_case("ckpt_offsets_lie.safetensors", safetensors_bytes(lying, whole[8 + struct.unpack("<Q", whole[:8])[0]:]),
              "ckpt_offsets_lie.safetensors: tensor data ranges overlap at offset 0",
              "a header whose offsets make two tensors share bytes")
    ckpt_case("ckpt_missing_key.safetensors", whole,
              "ckpt_missing_key.safetensors: unet: the weight 'conv_out.weight' is missing",
              "a UNet without its last convolution (out.2)")
    micro = micro_sd_checkpoint()
    wrong = dict(micro)
    wrong[f"{UNET}middle_block.0.in_layers.2.weight"] = ("F16", (32, 16, 3, 3))
    ckpt_case("ckpt_wrong_shape.safetensors", checkpoint_file(wrong),
              "W has 16 input channels per group, X has 32 channels",
              "a resnet convolution of the wrong input width")
    ckpt_case("ckpt_rank.safetensors", checkpoint_file({f"{UNET}input_blocks.0.0.weight": ("F16", (32, 4))}),
              "ckpt_rank.safetensors: unet: 'ckpt_rank.safetensors: model.diffusion_model.input_blocks.0.0.weight' "
              "has shape [32,4], expected rank 4", "a convolution weight of rank 2")
    ckpt_case("ckpt_unknown_family.safetensors",
              checkpoint_file({"double_blocks.0.img_attn.qkv.weight": ("F16", (96, 32)),
                               "img_in.weight": ("F16", (32, 64))}),
              "ckpt_unknown_family.safetensors: holds tensors only, not a model",
              "another family's weights (Flux-style keys)")
    ckpt_case("ckpt_sdxl.safetensors",
              checkpoint_file(dict(conv_in, **{"conditioner.embedders.1.model.ln_final.weight": ("F16", (1280,))})),
              "ckpt_sdxl.safetensors: unet: the weight 'conv_out.weight' is missing",
              "an SDXL file whose UNet is cut short")
    # SDXL-shaped micro UNets (label_emb): each breaks one SDXL rule.
    def micro_sdxl(context, add_inputs, **extra):
        t = micro_sd_checkpoint()
        b = f"{UNET}middle_block.1.transformer_blocks.0.attn2"
        t[f"{b}.to_k.weight"] = t[f"{b}.to_v.weight"] = ("F16", (32, context))
        t[f"{UNET}label_emb.0.0.weight"], t[f"{UNET}label_emb.0.0.bias"] = ("F16", (128, add_inputs)), ("F16", (128,))
        t[f"{UNET}label_emb.0.2.weight"], t[f"{UNET}label_emb.0.2.bias"] = ("F16", (128, 128)), ("F16", (128,))
        t.update(extra)
        return checkpoint_file(t)
    ckpt_case("ckpt_sdxl_refiner.safetensors", micro_sdxl(1280, 2560),
              "ckpt_sdxl_refiner.safetensors: an SDXL refiner", "the SDXL refiner, not supported yet")
    ckpt_case("ckpt_sdxl_small_add.safetensors", micro_sdxl(64, 100),
              "add_embedding.linear_1 takes 100 inputs, fewer than 6 time ids of 256 and a text",
              "SDXL's add_embedding too narrow for its six time ids")
    ckpt_case("ckpt_sdxl_one_encoder.safetensors",
              micro_sdxl(64, 1536 + 48, **{"conditioner.embedders.0.transformer.text_model.final_layer_norm.weight":
                                           ("F16", (32,))}),
              "ckpt_sdxl_one_encoder.safetensors: an SDXL model needs both its text encoders; it holds only the first",
              "an SDXL file without its second text encoder")
    # LoRA files: an unknown layout, a module whose matrices do not make its weight, another model's.
    lora_on = "generate -p x --model tokenizerless/sd1.safetensors --lora"
    add_file("lora_unknown.safetensors", checkpoint_file({"lycoris_unet_a.hada_w1_a": ("F16", (4, 4))}))
    case(f"{lora_on} lora_unknown.safetensors", "lora_unknown.safetensors: no LoRA keys in a layout kiln reads",
         "a LoRA in a layout kiln does not read (LyCORIS)")
    add_file("lora_wrong_shape.safetensors", checkpoint_file({
        "lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": ("F16", (4, 99, 1, 1)),
        "lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight": ("F16", (32, 4, 1, 1))}))
    case(f"{lora_on} lora_wrong_shape.safetensors:0.5",
         "lora_wrong_shape.safetensors: lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight: up [32,4,1,1] "
         "and down [4,99,1,1] do not make the weight's [32,32,1,1]", "a LoRA whose matrices do not fit the weight")
    add_file("lora_other_model/sdxl.safetensors", Symlink("../../models/sd-checkpoints/sdxl.safetensors"))
    add_file("lora_other_model/lora.safetensors", Symlink("../../models/sd-checkpoints/lora-sd1-kohya.safetensors"))
    case("generate -p x --model lora_other_model/sdxl.safetensors --lora lora_other_model/lora.safetensors",
         "(a LoRA for another model?)", "an SD 1.x LoRA on an SDXL checkpoint")
    case(f"{lora_on} no_such_lora.safetensors", "no_such_lora.safetensors", "a LoRA file that is not there")
    case("generate -p x --lora ../models/sd-checkpoints/lora-sd1-kohya.safetensors",
         "LoRA merges into a checkpoint's weights", "--lora on kiln's default model, an ONNX folder")
    ckpt_case("model.ckpt", b"PK\x03\x04" + bytes(60),
              "model.ckpt: a PyTorch pickle, which kiln does not load", "a pickle checkpoint")
    ckpt_case("model.ckpt", None, "model.ckpt: a PyTorch pickle, which kiln does not load",
              "a pickle given to kiln generate", command="generate -p x --model")
    add_file("tokenizerless/sd1.safetensors", Symlink("../../models/sd-checkpoints/sd1.safetensors"))
    case("generate -p x --model tokenizerless/sd1.safetensors",
         "a single file holds no tokenizer; put CLIP's vocab.json and merges.txt", "no tokenizer beside a single file")
    case("run ckpt_unknown_family.safetensors --component vae_decoder",
         "ckpt_unknown_family.safetensors: holds tensors only, not a model", "--component of a bag of tensors")
    case("run tokenizerless/sd1.safetensors --component text", "--component text: not a network of",
         "a component no checkpoint has")

    index = {"model_index.json": json.dumps({"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"]}).encode()}
    for path, data in index.items():
        add_file(f"diffusers_no_unet/{path}", data)
        add_file(f"diffusers_escape/{path}", data)
        add_file(f"diffusers_bin/{path}", data)
    add_file("diffusers_no_unet/unet/config.json", b"{}")
    case("run diffusers_no_unet", "diffusers_no_unet/unet: no diffusion_pytorch_model.safetensors",
         "a diffusers folder without UNet weights")
    add_file("diffusers_escape/unet/diffusion_pytorch_model.safetensors.index.json",
             json.dumps({"weight_map": {"conv_in.weight": "../../weights.safetensors"}}).encode())
    case("run diffusers_escape", "tensor 'conv_in.weight' is in \"../../weights.safetensors\", not a file of this folder",
         "a shard index naming a file outside the folder")
    add_file("diffusers_bin/unet/diffusion_pytorch_model.bin", b"PK\x03\x04" + bytes(60))
    case("run diffusers_bin", "diffusion_pytorch_model.bin: a PyTorch pickle", "pickled diffusers weights")


def wan_cases():
    """Malformed Wan folders: copies of tests/models/wan-tiny with one part
    missing or broken (the copies' unchanged files are the same bytes, which
    git stores once)."""
    here = os.path.dirname(os.path.abspath(__file__))
    tiny = os.path.join(here, "..", "tests", "models", "wan-tiny")
    sys.path.insert(0, here)
    from wan.safetensors_io import Entry, read_safetensors, write_safetensors  # noqa: E402

    def copy_folder(src, dst, skip=()):
        root = os.path.join(tiny, src)
        for folder, _, files in os.walk(root):
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(folder, f), root)
                if any(rel == s or rel.startswith(s + "/") for s in skip):
                    continue
                with open(os.path.join(folder, f), "rb") as fh:
                    add_file(f"{dst}/{rel}", fh.read())

    video = "--frames 5 --width 64 --height 64 --steps 1 -q"
    copy_folder("diffusers", "wan_no_transformer", skip=("transformer",))
    case(f"generate -p x -m wan_no_transformer {video}",
         "wan_no_transformer/transformer: missing from the Wan diffusers folder", "a Wan folder without its transformer")

    copy_folder("diffusers", "wan_truncated", skip=("text_encoder/model-00002-of-00002.safetensors",))
    with open(os.path.join(tiny, "diffusers", "text_encoder", "model-00002-of-00002.safetensors"), "rb") as fh:
        shard = fh.read()
    add_file("wan_truncated/text_encoder/model-00002-of-00002.safetensors", shard[:len(shard) // 2])
    case(f"generate -p x -m wan_truncated {video}", "model-00002-of-00002.safetensors: tensor",
         "a text encoder shard cut in half")

    copy_folder("diffusers", "wan_wrong_shape", skip=("transformer/diffusion_pytorch_model.safetensors",))
    tensors = read_safetensors(os.path.join(tiny, "diffusers", "transformer", "diffusion_pytorch_model.safetensors"))
    tensors["blocks.1.attn1.to_k.weight"] = tensors["blocks.1.attn1.to_k.weight"][:, :48].copy()
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "t.safetensors")
        write_safetensors(path, {k: Entry("F32", v.shape, (lambda v=v: v)) for k, v in tensors.items()})
        with open(path, "rb") as fh:
            add_file("wan_wrong_shape/transformer/diffusion_pytorch_model.safetensors", fh.read())
    finally:
        shutil.rmtree(tmp)
    case(f"generate -p x -m wan_wrong_shape {video}", "blocks.1/attn1/to_k/Linear",
         "a transformer weight of the wrong shape")

    copy_folder("diffusers", "wan_bad_tokenizer", skip=("tokenizer/spiece.model",))
    add_file("wan_bad_tokenizer/tokenizer/spiece.model", bytes(range(256)) * 4)
    case(f"generate -p x -m wan_bad_tokenizer {video}", "spiece.model: not a SentencePiece model",
         "a tokenizer model that is no SentencePiece model")

    copy_folder("diffusers", "wan_bad_vae_config", skip=("vae/config.json",))
    with open(os.path.join(tiny, "diffusers", "vae", "config.json")) as fh:
        vae_config = json.load(fh)
    vae_config["latents_mean"] = vae_config["latents_mean"][:3]
    add_file("wan_bad_vae_config/vae/config.json", json.dumps(vae_config).encode())
    case(f"generate -p x -m wan_bad_vae_config {video}", "48 latent channels but 3 means",
         "a VAE config whose latent statistics do not fit its channels")

    copy_folder("original", "wan_pickles", skip=("Wan2.2_VAE.safetensors",))
    add_file("wan_pickles/Wan2.2_VAE.pth", b"PK\x03\x04" + bytes(60))
    case(f"generate -p x -m wan_pickles {video}",
         "Wan2.2_VAE.pth: the VAE as Wan ships it, a PyTorch pickle, which kiln does not load",
         "Wan's own folder with its VAE still a pickle")

    copy_folder("original", "wan_no_tokenizer", skip=("google",))
    case(f"generate -p x -m wan_no_tokenizer {video}",
         "wan_no_tokenizer/google/umt5-xxl/spiece.model: missing", "Wan's own folder without its tokenizer")

    good = "../models/wan-tiny/diffusers"
    case(f"generate -p x -m {good} --frames 8 --width 64 --height 64 -q", "--frames must be 4k+1",
         "a frame count that is not 4k+1")
    case(f"generate -p x -m {good} --frames 5 --width 64 --height 72 -q", "--height must be a multiple of 32",
         "a video height that is not a multiple of 32")
    case(f"generate -p x -m {good} --frames 5 --width 64 --height 64 -o out.png -q", "a video is written as .mp4",
         "a video asked for as a PNG")


# ---------------------------------------------------------------- fuzz seeds

# Tiny ONNX backend node tests (Debian's libonnx-testdata): valid models over
# many ops, and their TensorProto (.pb) inputs in several dtypes.
NODE_TESTS = "/usr/share/libonnx-testdata/data/node"
SEED_MODELS = """relu add matmul_2d gemm_default_no_bias conv_with_strides_padding
softmax_axis_1 layer_normalization_2d_axis0 reshape_reordered_all_dims
constantofshape_int_zeros concat_2d_axis_0 transpose_default slice gather_0
where_example resize_upsample_scales_nearest einsum_batch_matmul
split_equal_parts_1d expand_dim_changed range_float_type_positive_delta
cast_FLOAT_to_FLOAT16 cumsum_1d unsqueeze_axis_0 flatten_axis0""".split()
SEED_TENSORS = ["relu/test_data_set_0/input_0.pb",  # f32
                "gather_0/test_data_set_0/input_1.pb",  # i64
                "where_example/test_data_set_0/input_0.pb",  # bool
                "cast_FLOAT_to_FLOAT16/test_data_set_0/output_0.pb",  # f16
                "range_float_type_positive_delta/test_data_set_0/input_0.pb"]  # f32 scalar


def symbolic_model():
    """A valid model with what the node tests lack: a symbolic batch dim,
    Constant nodes in several attribute forms, typed (non-raw) initializer data."""
    w = TensorProto()
    w.name, w.data_type = "w", FLOAT
    w.dims.extend([3])
    w.float_data.extend([1.0, 2.0, 3.0])
    nodes = [helper.make_node("Constant", [], ["shape"], value_ints=[-1, 3]),
             helper.make_node("Constant", [], ["half"], value_float=0.5),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Add", ["r", "w"], ["a"]),
             helper.make_node("Mul", ["a", "half"], ["y"])]
    return model(nodes, [vinfo("x", shape=("batch", 3))], [vinfo("y", shape=("batch", 3))], [w])


def fuzz_seeds():
    """{target: [(file name, bytes)]}: valid files of each format and every
    bad input of that format, so the fuzzers start next to each check."""
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    seeds = {"onnx_import": [], "onnx_tensor": [], "npy": [], "safetensors": []}
    for name, data in FILES:
        target = {".onnx": "onnx_import", ".npy": "npy", ".safetensors": "safetensors"}.get(
            os.path.splitext(name)[1])
        if target and not isinstance(data, Symlink) and "/" not in name:
            seeds[target].append((name, data))
    for t in SEED_MODELS:
        seeds["onnx_import"].append((f"node_{t}.onnx", read(f"{NODE_TESTS}/test_{t}/model.onnx")))
    seeds["onnx_import"].append(("symbolic.onnx", serialize(symbolic_model())))

    for path in SEED_TENSORS:
        seeds["onnx_tensor"].append(("node_" + path.split("/")[0] + ".pb", read(f"{NODE_TESTS}/test_{path}")))
    typed = TensorProto()
    typed.data_type = INT64
    typed.dims.extend([2, 2])
    typed.int64_data.extend([1, -2, 3, -4])
    seeds["onnx_tensor"].append(("typed_i64.pb", typed.SerializeToString()))
    i32 = TensorProto()
    i32.data_type = TensorProto.INT32
    i32.dims.extend([3])
    i32.int32_data.extend([7, 8, 9])
    seeds["onnx_tensor"].append(("typed_i32.pb", i32.SerializeToString()))
    seeds["onnx_tensor"].append(("external.pb", external_tensor("e", [2], "x.bin").SerializeToString()))
    seeds["onnx_tensor"].append(("raw_short.pb", raw_tensor("r", [4], raw=b"\0" * 8).SerializeToString()))

    for descr, shape in (("<f4", (2, 3)), ("<i8", ()), ("|b1", (4,)), ("<f2", (1, 2, 2)), ("|u1", (0,))):
        n = int(np.prod(shape))
        seeds["npy"].append((f"valid_{descr[1:]}_{len(shape)}d.npy",
                             npy_bytes(descr, shape, bytes(n * int(descr[2:])))))
    seeds["npy"].append(("valid_v2.npy", npy_bytes("<i4", (3,), bytes(12), version=(2, 0))))

    good = np.arange(6, dtype="<f4").tobytes()
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "I64", "shape": [1], "data_offsets": [24, 32]},
              "c": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [32, 40]},
              "d": {"dtype": "BOOL", "shape": [0], "data_offsets": [40, 40]}}
    seeds["safetensors"].append(("valid_four.safetensors", safetensors_bytes(header, good + bytes(16))))
    seeds["safetensors"].append(("valid_empty.safetensors", safetensors_bytes({})))
    seeds["safetensors"].append(("sd_micro.safetensors", checkpoint_file(micro_sd_checkpoint())))
    return seeds


def onnx_dictionary():
    """A libFuzzer dictionary for the ONNX importer: op and attribute names
    are strings a byte-level mutator would take ages to spell."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "src", "ir", "op_table.def")) as f:
        ops = re.findall(r'^KILN_OP\(\w+, "(\w+)"', f.read(), re.M)
    attrs = """allowzero alpha auto_pad axes axis beta coordinate_transformation_mode
    dilations epsilon equation exclusive group keepdims kernel_shape mode output_padding
    pads perm reverse select_last_index split strides to transA transB upper value
    value_float value_floats value_int value_ints location offset length""".split()
    words = ops + ["Constant", "ai.onnx"] + attrs
    return "".join(f'"{w}"\n' for w in words)


def write_seeds(root):
    for target, files in fuzz_seeds().items():
        folder = os.path.join(root, target)
        os.makedirs(folder, exist_ok=True)
        for old in os.listdir(folder):  # drop seeds a previous version wrote
            os.remove(os.path.join(folder, old))
        for name, data in files:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
    with open(os.path.join(root, "..", "onnx_import.dict"), "w") as f:
        f.write("# Written by tools/make_bad_inputs.py: op and attribute names for onnx_import_fuzzer.\n")
        f.write(onnx_dictionary())
    return sum(len(files) for files in fuzz_seeds().values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "bad_inputs"))
    ap.add_argument("--corpus", default=os.path.join(here, "..", "fuzz", "corpus"),
                    help="where the fuzzers' seed corpora go (one folder per fuzz target)")
    args = ap.parse_args()
    build_cases()
    wan_cases()
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):  # a renamed case must not leave its old file behind
        path = os.path.join(args.out, old)
        if old == "check.sh":
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    for name, data in FILES:
        path = os.path.join(args.out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(data, Symlink):
            os.symlink(data, path)
            continue
        with open(path, "wb") as f:
            f.write(data)
    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("# Written by tools/make_bad_inputs.py; do not edit by hand.\n")
        f.write("# <kiln args, relative to this folder> | <expected substring of the one error line>\n")
        for args_, expect, why in CASES:
            assert "|" not in args_ and "\n" not in expect
            f.write(f"# {why}\n{args_} | {expect}\n")
    print(f"wrote {len(FILES)} files and {len(CASES)} cases to {os.path.normpath(args.out)}")
    print(f"wrote {write_seeds(args.corpus)} fuzz seeds to {os.path.normpath(args.corpus)}")


if __name__ == "__main__":
    main()
