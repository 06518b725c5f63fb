#!/usr/bin/env python3
"""Independent reader of TensorBoard event files, for tests/obs/tensorboard_test.cpp.

Standard library only: its own CRC32C (bitwise-built table, Castagnoli 0x82F63B78) and its own
protobuf wire parser built from the field numbers of event.proto / summary.proto / tensor.proto.
Checks both masked CRCs of every record and rejects unknown fields, wrong wire types, truncation
and trailing bytes. Prints one JSON object per record: wall_time and float values as their IEEE
bits (hex), so NaN and infinities compare exactly.

With --protobuf it also decodes every record with Google's protobuf runtime (python3-protobuf,
messages declared at run time from the same field numbers), checks both decoders agree, and checks
that re-serializing gives back the record's bytes. Exit status 3 if python3-protobuf is missing.

Usage: read_tfevents.py EVENT_FILE [--protobuf]
"""
import json
import struct
import sys


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class FormatError(Exception):
    pass


def read_varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise FormatError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise FormatError("varint longer than 10 bytes")


def fields(buf):
    """Yields (field number, wire type, value): int for varint, bits for fixed, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise FormatError("truncated fixed64")
            value = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise FormatError("truncated length-delimited field %d" % number)
            value = bytes(buf[pos:pos + n])
            pos += n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise FormatError("truncated fixed32")
            value = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        else:
            raise FormatError("wire type %d" % wire)
        yield number, wire, value


def expect(wire, want, what):
    if wire != want:
        raise FormatError("%s: wire type %d, expected %d" % (what, wire, want))


def to_int64(u):
    return u - (1 << 64) if u >= 1 << 63 else u


def parse_tensor(buf):
    out = {"dtype": 0, "dims": None, "strings": []}
    for number, wire, value in fields(buf):
        if number == 1:
            expect(wire, 0, "TensorProto.dtype")
            out["dtype"] = value
        elif number == 2:
            expect(wire, 2, "TensorProto.tensor_shape")
            dims = []
            for n2, w2, v2 in fields(value):
                if n2 != 2:
                    raise FormatError("TensorShapeProto field %d" % n2)
                expect(w2, 2, "TensorShapeProto.dim")
                size = 0
                for n3, w3, v3 in fields(v2):
                    if n3 != 1:
                        raise FormatError("Dim field %d" % n3)
                    expect(w3, 0, "Dim.size")
                    size = to_int64(v3)
                dims.append(size)
            out["dims"] = dims
        elif number == 8:
            expect(wire, 2, "TensorProto.string_val")
            out["strings"].append(value)
        else:
            raise FormatError("TensorProto field %d" % number)
    return out


def parse_metadata(buf):
    out = {"plugin": "", "content": b"", "data_class": 0}
    for number, wire, value in fields(buf):
        if number == 1:
            expect(wire, 2, "SummaryMetadata.plugin_data")
            for n2, w2, v2 in fields(value):
                expect(w2, 2, "PluginData field %d" % n2)
                if n2 == 1:
                    out["plugin"] = v2.decode("utf-8")
                elif n2 == 2:
                    out["content"] = v2
                else:
                    raise FormatError("PluginData field %d" % n2)
        elif number == 4:
            expect(wire, 0, "SummaryMetadata.data_class")
            out["data_class"] = value
        else:
            raise FormatError("SummaryMetadata field %d" % number)
    return out


def parse_value(buf):
    out = {}
    tensor = metadata = None
    for number, wire, value in fields(buf):
        if number == 1:
            expect(wire, 2, "Value.tag")
            out["tag"] = value.decode("utf-8")
        elif number == 2:
            expect(wire, 5, "Value.simple_value")
            out["value_bits"] = "%08x" % value
        elif number == 8:
            expect(wire, 2, "Value.tensor")
            tensor = parse_tensor(value)
        elif number == 9:
            expect(wire, 2, "Value.metadata")
            metadata = parse_metadata(value)
        else:
            raise FormatError("Summary.Value field %d" % number)
    if "tag" not in out:
        raise FormatError("Summary.Value without a tag")
    if ("value_bits" in out) == (tensor is not None):
        raise FormatError("Summary.Value needs exactly one of simple_value and tensor")
    if tensor is not None:
        if metadata is None or metadata["plugin"] != "text" or metadata["content"] != b"":
            raise FormatError("tensor value without text plugin metadata: %r" % (metadata,))
        if tensor["dtype"] != 7 or tensor["dims"] != [] or len(tensor["strings"]) != 1:
            raise FormatError("text tensor is not a scalar DT_STRING: %r" % (tensor,))
        out["text"] = tensor["strings"][0].decode("utf-8")
        out["data_class"] = metadata["data_class"]
    return out


def parse_event(buf):
    out = {"step": 0}
    for number, wire, value in fields(buf):
        if number == 1:
            expect(wire, 1, "Event.wall_time")
            out["wall_time_bits"] = "%016x" % value
        elif number == 2:
            expect(wire, 0, "Event.step")
            out["step"] = to_int64(value)
        elif number == 3:
            expect(wire, 2, "Event.file_version")
            out["file_version"] = value.decode("utf-8")
        elif number == 5:
            expect(wire, 2, "Event.summary")
            values = []
            for n2, w2, v2 in fields(value):
                if n2 != 1:
                    raise FormatError("Summary field %d" % n2)
                expect(w2, 2, "Summary.value")
                values.append(parse_value(v2))
            out["values"] = values
        elif number == 10:
            expect(wire, 2, "Event.source_metadata")
            for n2, w2, v2 in fields(value):
                if n2 != 1:
                    raise FormatError("SourceMetadata field %d" % n2)
                expect(w2, 2, "SourceMetadata.writer")
                out["writer"] = v2.decode("utf-8")
        else:
            raise FormatError("Event field %d" % number)
    if "wall_time_bits" not in out:
        raise FormatError("Event without wall_time")
    return out


def records(data):
    """Yields the data of every TFRecord, checking lengths and both masked CRCs."""
    pos, index = 0, 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise FormatError("record %d: truncated header" % index)
        header = data[pos:pos + 8]
        (n,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack_from("<I", data, pos + 8)
        if header_crc != masked(crc32c(header)):
            raise FormatError("record %d: length CRC %08x, expected %08x" % (index, header_crc, masked(crc32c(header))))
        if pos + 12 + n + 4 > len(data):
            raise FormatError("record %d: truncated data" % index)
        body = data[pos + 12:pos + 12 + n]
        (data_crc,) = struct.unpack_from("<I", data, pos + 12 + n)
        if data_crc != masked(crc32c(body)):
            raise FormatError("record %d: data CRC %08x, expected %08x" % (index, data_crc, masked(crc32c(body))))
        yield body
        pos += 12 + n + 4
        index += 1


def protobuf_event_class():
    """The Event message, declared at run time through Google's protobuf runtime."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="llamatrain_test_event.proto", package="t", syntax="proto3")

    def message(name, specs, parent=None):
        m = (parent.nested_type if parent else f.message_type).add(name=name)
        for fname, number, ftype, type_name, repeated in specs:
            field = m.field.add(name=fname, number=number, type=ftype,
                                label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if type_name:
                field.type_name = type_name
        return m

    message("Dim", [("size", 1, F.TYPE_INT64, None, False), ("name", 2, F.TYPE_STRING, None, False)])
    message("TensorShapeProto", [("dim", 2, F.TYPE_MESSAGE, ".t.Dim", True)])
    message("TensorProto", [("dtype", 1, F.TYPE_INT32, None, False),
                            ("tensor_shape", 2, F.TYPE_MESSAGE, ".t.TensorShapeProto", False),
                            ("string_val", 8, F.TYPE_BYTES, None, True)])
    message("PluginData", [("plugin_name", 1, F.TYPE_STRING, None, False), ("content", 2, F.TYPE_BYTES, None, False)])
    message("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, ".t.PluginData", False),
                                ("data_class", 4, F.TYPE_INT32, None, False)])
    value = message("Value", [("tag", 1, F.TYPE_STRING, None, False),
                              ("simple_value", 2, F.TYPE_FLOAT, None, False),
                              ("tensor", 8, F.TYPE_MESSAGE, ".t.TensorProto", False),
                              ("metadata", 9, F.TYPE_MESSAGE, ".t.SummaryMetadata", False)])
    value.oneof_decl.add(name="value")
    for field in value.field:
        if field.name in ("simple_value", "tensor"):
            field.oneof_index = 0
    message("Summary", [("value", 1, F.TYPE_MESSAGE, ".t.Value", True)])
    message("SourceMetadata", [("writer", 1, F.TYPE_STRING, None, False)])
    event = message("Event", [("wall_time", 1, F.TYPE_DOUBLE, None, False),
                              ("step", 2, F.TYPE_INT64, None, False),
                              ("file_version", 3, F.TYPE_STRING, None, False),
                              ("summary", 5, F.TYPE_MESSAGE, ".t.Summary", False),
                              ("source_metadata", 10, F.TYPE_MESSAGE, ".t.SourceMetadata", False)])
    event.oneof_decl.add(name="what")
    for field in event.field:
        if field.name in ("file_version", "summary"):
            field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("t.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def check_with_protobuf(event_class, body, mine):
    """Google's decoder must agree with ours, and re-serialize to the same bytes."""
    e = event_class()
    e.ParseFromString(body)
    if e.SerializeToString() != body:
        raise FormatError("protobuf re-serializes the record differently")
    theirs = {"step": e.step, "wall_time_bits": "%016x" % struct.unpack("<Q", struct.pack("<d", e.wall_time))[0]}
    if e.HasField("file_version"):
        theirs["file_version"] = e.file_version
    if e.HasField("source_metadata"):
        theirs["writer"] = e.source_metadata.writer
    if e.HasField("summary"):
        theirs["values"] = []
        for v in e.summary.value:
            item = {"tag": v.tag}
            if v.WhichOneof("value") == "simple_value":
                item["value_bits"] = "%08x" % struct.unpack("<I", struct.pack("<f", v.simple_value))[0]
            else:
                item["text"] = v.tensor.string_val[0].decode("utf-8")
                item["data_class"] = v.metadata.data_class
            theirs["values"].append(item)
    if theirs != mine:
        raise FormatError("protobuf decodes %r, this reader %r" % (theirs, mine))


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--protobuf"):
        print(__doc__, file=sys.stderr)
        return 2
    event_class = None
    if len(sys.argv) == 3:
        try:
            event_class = protobuf_event_class()
        except ImportError as e:
            print("python3-protobuf is not installed (%s)" % e, file=sys.stderr)
            return 3
    with open(sys.argv[1], "rb") as fh:
        data = fh.read()
    try:
        for body in records(data):
            event = parse_event(body)
            if event_class is not None:
                check_with_protobuf(event_class, body, event)
            print(json.dumps(event))
    except (FormatError, UnicodeDecodeError) as e:
        print("read_tfevents: %s: %s" % (sys.argv[1], e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
