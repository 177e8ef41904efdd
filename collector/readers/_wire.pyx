# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The OTLP wire reader, compiled: an `ExportTraceServiceRequest`'s protobuf bytes in, the
columns of its `SpanRecords` out, without a Python object per span (issue 46); and
`spans`, the records' `Span`s made straight from the columns, for the collector's intake
until assembly and judging read the records themselves.

It walks ExportTraceServiceRequest → ResourceSpans → ScopeSpans → Span itself (field
numbers of opentelemetry-proto's trace.proto, common.proto and resource.proto) and keeps
what the evaluator reads; every other field of a known message is still checked as the
protobuf package checks it, so that the two accept and refuse the same bytes: strings
must be UTF-8, messages and groups nest at most 100 deep, tags take at most 5 bytes and
lengths at most 5, varints at most 10; a field of a known number with another wire type
is an unknown field, skipped by its wire type, as upb skips it. Attribute values other
than a single string, bool, int or double (arrays, key-value lists, bytes, merged
repeats) are rare: the protobuf package reads those few from their own bytes, so they
come out as `spans_from_otlp` makes them. `span_records.py` is the pure-Python twin, and
tests/collector/readers/test_wire_reader.py holds the two equal on real, random and
mutated messages.

Every read is bounded by the end of the field that holds it: malformed input raises
`TraceReadError`, naming the byte offset, and never reads outside the buffer.
"""

cimport cython
from cpython.array cimport array, resize_smart
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.dict cimport PyDict_SetItem
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.object cimport PyObject_Hash
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport qsort
from libc.string cimport memcmp, memcpy, memset

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)

from collections.abc import KeysView as _KeysView, Mapping as _Mapping
from dataclasses import fields as _dataclass_fields

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from ._errors import TraceReadError
from ..spans import Span, SpanEvent, SpanKind
from ._otlp import UNKNOWN_SERVICE, _value
from spanbudget.common.semconv import HOST_ID, HOST_NAME, SERVICE_NAME

# Wire types.
cdef enum:
    VARINT = 0
    I64 = 1
    LEN = 2
    SGROUP = 3
    EGROUP = 4
    I32 = 5

# span_records' value types (the twin defines the same numbers).
cdef enum:
    STR = 0
    BOOL = 1
    INT = 2
    DOUBLE = 3
    LIST = 4

cdef int MAX_DEPTH = 100  # upb's default: messages and groups below the top one
cdef int64_t MAX_SIZE = 0x7FFFFFFF
cdef int STATUS_CODE_ERROR = 2
cdef bytes _SERVICE_NAME = SERVICE_NAME.encode()
cdef bytes _HOST_NAME = HOST_NAME.encode()
cdef bytes _HOST_ID = HOST_ID.encode()
cdef object _array = array


cdef struct Entry:
    # One distinct string of the request, by its bytes (which the request holds).
    const uint8_t* ptr
    Py_ssize_t size
    uint64_t hash
    int wanted  # as an attribute key: -1 not asked yet, 0 no, 1 yes
    Py_ssize_t attr_span  # the last span that kept an attribute of this key, and where
    Py_ssize_t attr_pos
    Py_ssize_t event_span  # the last span with an event of this name, and where
    Py_ssize_t event_pos


cdef struct Event:
    uint64_t time
    const uint8_t* name
    Py_ssize_t size
    Py_ssize_t index


cdef struct KeyValue:
    # What a KeyValue holds: its own bytes, its key (the last one), its value (the last
    # occurrence, and how many there were) and what that AnyValue's last field was.
    const uint8_t* start
    const uint8_t* end
    const uint8_t* key
    Py_ssize_t key_size
    const uint8_t* value
    const uint8_t* value_end
    int values
    int depth  # of the value
    int kind  # the AnyValue's last value field (0: none), when values == 1
    const uint8_t* text  # kind 1: the string
    Py_ssize_t text_size
    uint64_t number  # kinds 2, 3, 4: the varint or the fixed64 bits


cdef inline uint64_t _hash(const uint8_t* p, Py_ssize_t n, uint64_t seed) noexcept nogil:
    """A string's hash, 8 bytes a step; keyed by the reader's random seed, so that
    strings made to collide cannot turn interning quadratic."""
    cdef uint64_t h = seed ^ (<uint64_t>n * 0x9E3779B97F4A7C15ULL), word
    while n >= 8:
        memcpy(&word, p, 8)
        h = (h ^ word) * 0xFF51AFD7ED558CCDULL
        h ^= h >> 32
        p += 8
        n -= 8
    if n > 0:
        word = 0
        memcpy(&word, p, n)
        h = (h ^ word) * 0xC4CEB9FE1A85EC53ULL
    h ^= h >> 33  # murmur3's finaliser: the low bits pick the slot
    h *= 0xFF51AFD7ED558CCDULL
    h ^= h >> 33
    return h


cdef inline const uint8_t* _varint(
    const uint8_t* p, const uint8_t* end, uint64_t* out
) noexcept nogil:
    """A varint of at most 10 bytes, modulo 2**64 (as upb reads one); NULL past `end`."""
    cdef uint64_t value = 0
    cdef unsigned int shift = 0
    cdef uint8_t byte
    while shift < 70:
        if p >= end:
            return NULL
        byte = p[0]
        p += 1
        value |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            out[0] = value
            return p
        shift += 7
    return NULL


cdef inline const uint8_t* _short_varint(
    const uint8_t* p, const uint8_t* end, uint64_t limit, uint64_t* out
) noexcept nogil:
    """A tag or a length: at most 5 bytes and at most `limit`; NULL otherwise."""
    cdef uint64_t value = 0
    cdef unsigned int shift = 0
    cdef uint8_t byte
    while shift < 35:
        if p >= end:
            return NULL
        byte = p[0]
        p += 1
        value |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            if value > limit:
                return NULL
            out[0] = value
            return p
        shift += 7
    return NULL


cdef inline bint _utf8(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Whether p[:n] is well-formed UTF-8 (Unicode's table 3-7: no overlong forms, no
    surrogates, nothing past U+10FFFF), as upb and Python's codec require."""
    cdef Py_ssize_t i = 0
    cdef uint64_t word
    cdef uint8_t a, b
    while i < n:
        if i + 8 <= n:
            memcpy(&word, p + i, 8)
            if (word & 0x8080808080808080ULL) == 0:
                i += 8
                continue
        a = p[i]
        if a < 0x80:
            i += 1
            continue
        if a < 0xC2:
            return False
        if a < 0xE0:
            if i + 1 >= n or (p[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
            continue
        if i + 1 >= n:
            return False
        b = p[i + 1]
        if a < 0xF0:
            if (
                (b & 0xC0) != 0x80
                or (a == 0xE0 and b < 0xA0)
                or (a == 0xED and b > 0x9F)
                or i + 2 >= n
                or (p[i + 2] & 0xC0) != 0x80
            ):
                return False
            i += 3
            continue
        if (
            a > 0xF4
            or (b & 0xC0) != 0x80
            or (a == 0xF0 and b < 0x90)
            or (a == 0xF4 and b > 0x8F)
            or i + 3 >= n
            or (p[i + 2] & 0xC0) != 0x80
            or (p[i + 3] & 0xC0) != 0x80
        ):
            return False
        i += 4
    return True


cdef int _event_order(const void* a, const void* b) noexcept nogil:
    """`first_events`' order: by time, then by name (UTF-8 bytes sort as code points)."""
    cdef const Event* x = <const Event*>a
    cdef const Event* y = <const Event*>b
    if x.time != y.time:
        return -1 if x.time < y.time else 1
    cdef Py_ssize_t n = x.size if x.size < y.size else y.size
    cdef int c = memcmp(x.name, y.name, n)
    if c != 0:
        return c
    return -1 if x.size < y.size else (1 if x.size > y.size else 0)


def read(bytes data, str source, keys, uint64_t seed=0):
    """The columns of `SpanRecords` for `data`, in its field order (span_records.py
    builds the records from them); raises `TraceReadError` on input protobuf refuses
    and on spans with ids of the wrong length, as `spans_from_otlp` words it. `seed`
    keys the string hash (the records do not depend on it)."""
    cdef _Reader reader = _Reader(data, source, keys, seed)
    reader.read_request()
    return reader.columns()


@cython.final  # direct calls, which the C compiler can inline
cdef class _Reader:
    """One request being read: the interned strings, the columns, a span's events."""

    cdef bytes data
    cdef str source
    cdef const uint8_t* base
    cdef const uint8_t* stop
    cdef bint every
    cdef frozenset names
    cdef tuple prefixes
    # Interned strings: entries[i] is strings[i]; slots hold entry numbers, or -1.
    cdef Entry* entries
    cdef uint64_t seed
    cdef Py_ssize_t count
    cdef Py_ssize_t capacity
    cdef Py_ssize_t* slots
    cdef Py_ssize_t slot_mask
    cdef list strings
    cdef list kept  # bytes made here that entries point into
    # The current span's events.
    cdef Event* events
    cdef Py_ssize_t event_count
    cdef Py_ssize_t event_capacity
    cdef object bad_ids  # the message for the first span with bad ids, or None
    # The columns, as `SpanRecords` names them.
    cdef array trace_ids, span_ids, parent_ids, start_ns, end_ns, span_names, kinds
    cdef array errors, batches, span_at, span_len, attr_bounds, event_bounds
    cdef array attr_keys, attr_types, attr_values, event_names, event_times
    cdef array batch_services, batch_hosts, batch_scopes
    cdef array batch_resource_at, batch_resource_len, batch_scope_at, batch_scope_len
    cdef list lists
    cdef Py_ssize_t span_count

    def __cinit__(self, bytes data, str source, keys, uint64_t seed):
        self.data = data
        self.seed = seed
        self.source = source
        self.base = <const uint8_t*>PyBytes_AS_STRING(data)
        self.stop = self.base + PyBytes_GET_SIZE(data)
        self.every = keys.every
        self.names = keys.names
        self.prefixes = keys.prefixes
        self.capacity = 64
        self.slot_mask = 127
        self.entries = <Entry*>PyMem_Malloc(self.capacity * sizeof(Entry))
        self.slots = <Py_ssize_t*>PyMem_Malloc((self.slot_mask + 1) * sizeof(Py_ssize_t))
        self.event_capacity = 16
        self.events = <Event*>PyMem_Malloc(self.event_capacity * sizeof(Event))
        if self.entries is NULL or self.slots is NULL or self.events is NULL:
            raise MemoryError()
        memset(self.slots, 0xFF, (self.slot_mask + 1) * sizeof(Py_ssize_t))
        self.count = 0
        self.strings = []
        self.kept = []
        self.lists = []
        self.bad_ids = None
        self.span_count = 0
        self.trace_ids = _array("B")
        self.span_ids = _array("B")
        self.parent_ids = _array("B")
        self.start_ns = _array("Q")
        self.end_ns = _array("Q")
        self.span_names = _array("I")
        self.kinds = _array("B")
        self.errors = _array("B")
        self.batches = _array("I")
        self.span_at = _array("I")
        self.span_len = _array("I")
        self.attr_bounds = _array("I", [0])
        self.event_bounds = _array("I", [0])
        self.attr_keys = _array("I")
        self.attr_types = _array("B")
        self.attr_values = _array("q")
        self.event_names = _array("I")
        self.event_times = _array("Q")
        self.batch_services = _array("I")
        self.batch_hosts = _array("i")
        self.batch_scopes = _array("i")
        self.batch_resource_at = _array("I")
        self.batch_resource_len = _array("I")
        self.batch_scope_at = _array("I")
        self.batch_scope_len = _array("I")

    def __dealloc__(self):
        PyMem_Free(self.entries)
        PyMem_Free(self.slots)
        PyMem_Free(self.events)

    # Errors.

    cdef int fail(self, const uint8_t* at, str what) except -1:
        """Raise `TraceReadError` for malformed input at `at` (NULL: the end)."""
        offset = PyBytes_GET_SIZE(self.data) if at is NULL else at - self.base
        raise TraceReadError(
            self.source, f"not a valid OTLP protobuf message: {what} (at byte {offset})"
        )

    # Wire primitives: each returns the position after what it read, or raises.

    cdef inline const uint8_t* tag(
        self, const uint8_t* p, const uint8_t* end, uint32_t* tag
    ) except NULL:
        cdef uint64_t value = 0
        cdef const uint8_t* q
        if p < end and p[0] < 0x80:
            tag[0] = p[0]
            return p + 1
        q = _short_varint(p, end, 0xFFFFFFFFULL, &value)
        if q is NULL:
            self.fail(p, "a malformed tag")
        tag[0] = <uint32_t>value
        return q

    cdef inline const uint8_t* field(
        self, const uint8_t* p, const uint8_t* end, uint32_t* number, int* wire
    ) except NULL:
        """A message's next tag: field number 0 is malformed (inside a group it is not)."""
        cdef uint32_t value
        p = self.tag(p, end, &value)
        if value >> 3 == 0:
            self.fail(p, "field number 0")
        number[0] = value >> 3
        wire[0] = value & 7
        return p

    cdef inline const uint8_t* varint(
        self, const uint8_t* p, const uint8_t* end, uint64_t* out
    ) except NULL:
        cdef const uint8_t* q
        if p < end and p[0] < 0x80:
            out[0] = p[0]
            return p + 1
        q = _varint(p, end, out)
        if q is NULL:
            self.fail(p, "a truncated or over-long varint")
        return q

    cdef inline const uint8_t* fixed64(
        self, const uint8_t* p, const uint8_t* end, uint64_t* out
    ) except NULL:
        cdef int i
        cdef uint64_t value = 0
        if end - p < 8:
            self.fail(p, "a truncated fixed64")
        for i in range(8):  # little-endian whatever the host's order
            value |= (<uint64_t>p[i]) << (8 * i)
        out[0] = value
        return p + 8

    cdef inline const uint8_t* delimited(
        self, const uint8_t* p, const uint8_t* end, const uint8_t** body_end
    ) except NULL:
        """A length-delimited field's body: its start, and its end in `body_end`."""
        cdef uint64_t size = 0
        cdef const uint8_t* q
        if p < end and p[0] < 0x80:
            size = p[0]
            q = p + 1
        else:
            q = _short_varint(p, end, <uint64_t>MAX_SIZE, &size)
            if q is NULL:
                self.fail(p, "a malformed length")
        if <uint64_t>(end - q) < size:
            self.fail(p, f"a length of {size} bytes past the end of its message")
        body_end[0] = q + size
        return q

    cdef inline const uint8_t* text(
        self, const uint8_t* p, const uint8_t* end, const uint8_t** body_end
    ) except NULL:
        """A string field: its body, checked to be UTF-8."""
        p = self.delimited(p, end, body_end)
        if not _utf8(p, body_end[0] - p):
            self.fail(p, "a string field that is not UTF-8")
        return p

    cdef const uint8_t* skip(
        self, const uint8_t* p, const uint8_t* end, uint32_t tag, int depth
    ) except NULL:
        """Past the value of a field this reader does not read, by its wire type."""
        cdef int wire = tag & 7
        cdef uint64_t ignored
        cdef const uint8_t* body_end
        if wire == VARINT:
            return self.varint(p, end, &ignored)
        if wire == I64:
            if end - p < 8:
                self.fail(p, "a truncated fixed64")
            return p + 8
        if wire == LEN:
            self.delimited(p, end, &body_end)
            return body_end
        if wire == I32:
            if end - p < 4:
                self.fail(p, "a truncated fixed32")
            return p + 4
        if wire == SGROUP:
            return self.skip_group(p, end, tag, depth - 1)
        if wire == EGROUP:
            self.fail(p, "an end-group tag outside its group")
        self.fail(p, f"wire type {wire}")
        return NULL

    cdef const uint8_t* skip_group(
        self, const uint8_t* p, const uint8_t* end, uint32_t start, int depth
    ) except NULL:
        cdef uint32_t tag, closing = (start & ~7U) | EGROUP
        if depth < 0:
            self.fail(p, "groups nested too deeply")
        while True:
            if p >= end:
                self.fail(p, "a group without its end")
            p = self.tag(p, end, &tag)
            if tag == closing:
                return p
            p = self.skip(p, end, tag, depth)

    cdef int nested(self, const uint8_t* p, int depth) except -1:
        if depth < 0:
            self.fail(p, "messages nested too deeply")
        return 0

    # Interning: each distinct string once, by its bytes.

    cdef Py_ssize_t intern(self, const uint8_t* p, Py_ssize_t n) except -1:
        """The number of the string p[:n] (UTF-8, checked when first seen)."""
        cdef uint64_t h = _hash(p, n, self.seed)
        cdef Py_ssize_t slot = <Py_ssize_t>(h & <uint64_t>self.slot_mask)
        cdef Py_ssize_t at
        cdef Entry* entry
        while True:
            at = self.slots[slot]
            if at < 0:
                break
            entry = &self.entries[at]
            if entry.hash == h and entry.size == n and memcmp(entry.ptr, p, n) == 0:
                return at
            slot = (slot + 1) & self.slot_mask
        try:
            text = PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
        except UnicodeDecodeError:
            self.fail(p, "a string field that is not UTF-8")
        if self.count == self.capacity:
            self.grow_entries()
        at = self.count
        entry = &self.entries[at]
        entry.ptr = p
        entry.size = n
        entry.hash = h
        entry.wanted = -1
        entry.attr_span = -1
        entry.attr_pos = 0
        entry.event_span = -1
        entry.event_pos = 0
        self.strings.append(text)
        self.count += 1
        self.slots[slot] = at
        if 2 * self.count > self.slot_mask:
            self.rehash()
        return at

    cdef Py_ssize_t intern_str(self, str text) except -1:
        """The number of a string made here (a value the protobuf package rendered)."""
        encoded = text.encode()
        self.kept.append(encoded)
        return self.intern(
            <const uint8_t*>PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded)
        )

    cdef int grow_entries(self) except -1:
        cdef Entry* grown = <Entry*>PyMem_Realloc(
            self.entries, 2 * self.capacity * sizeof(Entry)
        )
        if grown is NULL:
            raise MemoryError()
        self.entries = grown
        self.capacity *= 2
        return 0

    cdef int rehash(self) except -1:
        cdef Py_ssize_t size = 2 * (self.slot_mask + 1), i, slot
        cdef Py_ssize_t* slots = <Py_ssize_t*>PyMem_Malloc(size * sizeof(Py_ssize_t))
        if slots is NULL:
            raise MemoryError()
        memset(slots, 0xFF, size * sizeof(Py_ssize_t))
        for i in range(self.count):
            slot = <Py_ssize_t>(self.entries[i].hash & <uint64_t>(size - 1))
            while slots[slot] >= 0:
                slot = (slot + 1) & (size - 1)
            slots[slot] = i
        PyMem_Free(self.slots)
        self.slots = slots
        self.slot_mask = size - 1
        return 0

    cdef bint wanted(self, Py_ssize_t key) except -1:
        """Whether the records keep attributes of key number `key` (asked once a key)."""
        cdef Entry* entry = &self.entries[key]
        if entry.wanted < 0:
            text = self.strings[key]
            entry.wanted = self.every or text in self.names or text.startswith(self.prefixes)
        return entry.wanted

    # ExportTraceServiceRequest

    cdef int read_request(self) except -1:
        cdef const uint8_t* p = self.base
        cdef const uint8_t* end = self.stop
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef Py_ssize_t i = 0
        if end - p > MAX_SIZE:  # offsets are 32 bits; protobuf stops at 2 GiB too
            self.fail(p, "a request larger than 2 GiB")
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.read_resource_spans(p, body_end, MAX_DEPTH - 1, i)
                i += 1
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, MAX_DEPTH)
        if self.bad_ids is not None:
            raise TraceReadError(self.source, self.bad_ids)
        return 0

    # ResourceSpans: 1 resource, 2 scope_spans, 3 schema_url. The resource may come
    # after the spans it describes: a first pass reads it, a second the spans.

    cdef int read_resource_spans(
        self, const uint8_t* start, const uint8_t* end, int depth, Py_ssize_t i
    ) except -1:
        cdef const uint8_t* p = start
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef Py_ssize_t j = 0
        self.nested(start, depth)
        found = [None, None, None]  # service.name, host.name, host.id
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.read_resource(p, body_end, depth - 1, found)
                p = body_end
            elif number == 3 and wire == LEN:
                self.text(p, end, &body_end)
                p = body_end
            elif number == 2 and wire == LEN:
                self.delimited(p, end, &body_end)  # the second pass reads it
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        service = found[0]
        if service is None:
            service = UNKNOWN_SERVICE
        host = found[1] or found[2]
        cdef Py_ssize_t service_index = self.intern_str(service)
        cdef Py_ssize_t host_index = -1 if host is None else self.intern_str(host)
        p = start
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 2 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.read_scope_spans(
                    p, body_end, depth - 1, i, j, service_index, host_index, start, end
                )
                j += 1
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # Resource: 1 attributes, 2 dropped_attributes_count, 3 entity_refs.

    cdef int read_resource(
        self, const uint8_t* p, const uint8_t* end, int depth, list found
    ) except -1:
        """Its service.name (the first) and host.name and host.id (the last non-empty),
        as `_otlp._service_name` and `_otlp._host` read them, into `found`."""
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef KeyValue kv
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.key_value(p, body_end, depth - 1, &kv)
                self.resource_attribute(&kv, found)
                p = body_end
            elif number == 3 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.check_entity_ref(p, body_end, depth - 1)
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    cdef int resource_attribute(self, KeyValue* kv, list found) except -1:
        cdef Py_ssize_t n = kv.key_size
        cdef int slot
        if n == len(_SERVICE_NAME) and memcmp(kv.key, <const char*>_SERVICE_NAME, n) == 0:
            if found[0] is not None:
                return 0
            slot = 0
        elif n == len(_HOST_NAME) and memcmp(kv.key, <const char*>_HOST_NAME, n) == 0:
            slot = 1
        elif n == len(_HOST_ID) and memcmp(kv.key, <const char*>_HOST_ID, n) == 0:
            slot = 2
        else:
            return 0
        value = self.value_object(kv)
        if slot > 0 and value == "":
            return 0
        found[slot] = value if type(value) is str else str(value)
        return 0

    cdef int check_entity_ref(self, const uint8_t* p, const uint8_t* end, int depth) except -1:
        """EntityRef: 1 schema_url, 2 type, 3 id_keys, 4 description_keys: strings."""
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if 1 <= number <= 4 and wire == LEN:
                self.text(p, end, &body_end)
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # ScopeSpans: 1 scope, 2 spans, 3 schema_url; two passes, as ResourceSpans.

    cdef int read_scope_spans(
        self, const uint8_t* start, const uint8_t* end, int depth, Py_ssize_t i,
        Py_ssize_t j, Py_ssize_t service, Py_ssize_t host, const uint8_t* resource_at,
        const uint8_t* resource_end,
    ) except -1:
        cdef const uint8_t* p = start
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef Py_ssize_t scope = -1, k = 0
        cdef Py_ssize_t batch = len(self.batch_services)
        self.nested(start, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.read_scope(p, body_end, depth - 1, &scope)
                p = body_end
            elif number == 3 and wire == LEN:
                self.text(p, end, &body_end)
                p = body_end
            elif number == 2 and wire == LEN:
                self.delimited(p, end, &body_end)
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        if scope >= 0 and self.entries[scope].size == 0:
            scope = -1  # an empty name is no name: `scope.name or None`
        _push_u32(self.batch_services, service)
        _push_i32(self.batch_hosts, host)
        _push_i32(self.batch_scopes, scope)
        _push_u32(self.batch_resource_at, resource_at - self.base)
        _push_u32(self.batch_resource_len, resource_end - resource_at)
        _push_u32(self.batch_scope_at, start - self.base)
        _push_u32(self.batch_scope_len, end - start)
        p = start
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 2 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.read_span(p, body_end, depth - 1, i, j, k, batch)
                k += 1
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # InstrumentationScope: 1 name, 2 version, 3 attributes, 4 dropped_attributes_count.

    cdef int read_scope(
        self, const uint8_t* p, const uint8_t* end, int depth, Py_ssize_t* name
    ) except -1:
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef KeyValue kv
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                name[0] = self.intern(p, body_end - p)
                p = body_end
            elif number == 2 and wire == LEN:
                self.text(p, end, &body_end)
                p = body_end
            elif number == 3 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.key_value(p, body_end, depth - 1, &kv)
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # Span: 1 trace_id, 2 span_id, 3 trace_state, 4 parent_span_id, 5 name, 6 kind,
    # 7 start_time_unix_nano, 8 end_time_unix_nano, 9 attributes,
    # 10 dropped_attributes_count, 11 events, 12 dropped_events_count, 13 links,
    # 14 dropped_links_count, 15 status, 16 flags.

    cdef int read_span(
        self, const uint8_t* start, const uint8_t* end, int depth, Py_ssize_t i,
        Py_ssize_t j, Py_ssize_t k, Py_ssize_t batch,
    ) except -1:
        cdef const uint8_t* p = start
        cdef const uint8_t* body_end
        cdef const uint8_t* trace_id = NULL
        cdef const uint8_t* span_id = NULL
        cdef const uint8_t* parent = NULL
        cdef Py_ssize_t trace_size = 0, span_size = 0, parent_size = 0
        cdef Py_ssize_t name = -1, span = self.span_count
        cdef uint64_t value, start_ns = 0, end_ns = 0
        cdef int32_t kind = 0, code = 0
        cdef uint32_t number
        cdef int wire
        self.nested(start, depth)
        self.event_count = 0
        while p < end:
            p = self.field(p, end, &number, &wire)
            if wire == LEN:
                if number == 9:
                    p = self.delimited(p, end, &body_end)
                    self.span_attribute(p, body_end, depth - 1, span)
                    p = body_end
                    continue
                if number == 11:
                    p = self.delimited(p, end, &body_end)
                    self.span_event(p, body_end, depth - 1)
                    p = body_end
                    continue
                if number == 1:
                    trace_id = self.delimited(p, end, &body_end)
                    trace_size = body_end - trace_id
                    p = body_end
                    continue
                if number == 2:
                    span_id = self.delimited(p, end, &body_end)
                    span_size = body_end - span_id
                    p = body_end
                    continue
                if number == 4:
                    parent = self.delimited(p, end, &body_end)
                    parent_size = body_end - parent
                    p = body_end
                    continue
                if number == 5:
                    p = self.delimited(p, end, &body_end)
                    name = self.intern(p, body_end - p)
                    p = body_end
                    continue
                if number == 3:
                    self.text(p, end, &body_end)
                    p = body_end
                    continue
                if number == 13:
                    p = self.delimited(p, end, &body_end)
                    self.check_link(p, body_end, depth - 1)
                    p = body_end
                    continue
                if number == 15:
                    p = self.delimited(p, end, &body_end)
                    self.read_status(p, body_end, depth - 1, &code)
                    p = body_end
                    continue
            elif wire == I64:
                if number == 7:
                    p = self.fixed64(p, end, &start_ns)
                    continue
                if number == 8:
                    p = self.fixed64(p, end, &end_ns)
                    continue
            elif wire == VARINT and number == 6:
                p = self.varint(p, end, &value)
                kind = <int32_t>(<uint32_t>value)  # an enum is an int32
                continue
            p = self.skip(p, end, (number << 3) | wire, depth)
        if name < 0:
            name = self.intern(p, 0)
        if self.bad_ids is None:
            self.check_ids(trace_size, span_size, parent_size, i, j, k)
        _push_bytes(self.trace_ids, trace_id, trace_size, 16)
        _push_bytes(self.span_ids, span_id, span_size, 8)
        _push_bytes(self.parent_ids, parent, parent_size, 8)
        _push_u64(self.start_ns, start_ns)
        _push_u64(self.end_ns, end_ns if end_ns > start_ns else start_ns)
        _push_u32(self.span_names, name)
        _push_u8(self.kinds, kind if 1 <= kind <= 5 else 1)  # 0 and unknown: INTERNAL
        _push_u8(self.errors, code == STATUS_CODE_ERROR)
        _push_u32(self.batches, batch)
        _push_u32(self.span_at, start - self.base)
        _push_u32(self.span_len, end - start)
        _push_u32(self.attr_bounds, len(self.attr_keys))
        self.emit_events(span)
        _push_u32(self.event_bounds, len(self.event_names))
        self.span_count += 1
        return 0

    cdef int check_ids(
        self, Py_ssize_t trace_size, Py_ssize_t span_size, Py_ssize_t parent_size,
        Py_ssize_t i, Py_ssize_t j, Py_ssize_t k,
    ) except -1:
        """Note the first span whose ids are missing or of the wrong length, in the
        words of `_otlp._bad_ids` (raised once the whole request has been read)."""
        if trace_size == 16 and span_size == 8 and (parent_size == 0 or parent_size == 8):
            return 0
        where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
        if trace_size == 0:
            self.bad_ids = f"{where}: traceId is missing"
        elif trace_size != 16:
            self.bad_ids = f"{where}: traceId has {trace_size} bytes, expected 16"
        elif span_size == 0:
            self.bad_ids = f"{where}: spanId is missing"
        elif span_size != 8:
            self.bad_ids = f"{where}: spanId has {span_size} bytes, expected 8"
        elif parent_size != 0 and parent_size != 8:
            self.bad_ids = f"{where}: parentSpanId has {parent_size} bytes, expected 8"
        return 0

    cdef int span_attribute(
        self, const uint8_t* p, const uint8_t* end, int depth, Py_ssize_t span
    ) except -1:
        """Keep a wanted attribute: a key once a span, at its first place, with its last
        value (a dict's behaviour, as `spans_from_otlp` builds one)."""
        cdef KeyValue kv
        cdef Py_ssize_t key, at
        cdef uint8_t kind
        cdef int64_t payload
        cdef Entry* entry
        self.key_value(p, end, depth, &kv)
        key = self.intern(kv.key, kv.key_size)
        if not self.wanted(key):
            return 0
        self.attribute_value(&kv, &kind, &payload)
        entry = &self.entries[key]  # after attribute_value: interning may move entries
        if entry.attr_span == self.span_count:
            at = entry.attr_pos
            self.attr_types.data.as_uchars[at] = kind
            self.attr_values.data.as_longlongs[at] = payload
            return 0
        entry.attr_span = self.span_count
        entry.attr_pos = len(self.attr_keys)
        _push_u32(self.attr_keys, key)
        _push_u8(self.attr_types, kind)
        _push_i64(self.attr_values, payload)
        return 0

    cdef int attribute_value(self, KeyValue* kv, uint8_t* kind, int64_t* payload) except -1:
        """A value as its type and its 64 bits: a string's number, a bool, an int, a
        double's bits, or the number of a list in `lists`."""
        cdef double number
        if kv.values == 1 and kv.kind == 1:
            kind[0] = STR
            payload[0] = self.intern(kv.text, kv.text_size)
        elif kv.values == 1 and kv.kind == 2:
            kind[0] = BOOL
            payload[0] = kv.number != 0
        elif kv.values == 1 and kv.kind == 3:
            kind[0] = INT
            payload[0] = <int64_t>kv.number
        elif kv.values == 1 and kv.kind == 4:
            kind[0] = DOUBLE
            payload[0] = <int64_t>kv.number
        else:
            value = self.rare_value(kv)
            if type(value) is str:
                kind[0] = STR
                payload[0] = self.intern_str(value)
            elif type(value) is bool:
                kind[0] = BOOL
                payload[0] = 1 if value else 0
            elif type(value) is int:
                kind[0] = INT
                payload[0] = value
            elif type(value) is float:
                kind[0] = DOUBLE
                number = value
                memcpy(payload, &number, 8)
            else:
                kind[0] = LIST
                payload[0] = len(self.lists)
                self.lists.append(value)
        return 0

    cdef object value_object(self, KeyValue* kv):
        """A value as `_otlp._value` gives it."""
        cdef double number
        if kv.values == 1 and kv.kind == 1:
            return self.strings[self.intern(kv.text, kv.text_size)]
        if kv.values == 1 and kv.kind == 2:
            return kv.number != 0
        if kv.values == 1 and kv.kind == 3:
            return <int64_t>kv.number
        if kv.values == 1 and kv.kind == 4:
            memcpy(&number, &kv.number, 8)
            return number
        return self.rare_value(kv)

    cdef object rare_value(self, KeyValue* kv):
        """Anything but one string, bool, int or double: read by the protobuf package
        from the value's own bytes (every occurrence joined, as protobuf merges them)."""
        cdef const uint8_t* p
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        if kv.values == 0:
            return _value(AnyValue())
        if kv.values == 1:
            return _value(AnyValue.FromString(self.slice(kv.value, kv.value_end)))
        parts = []
        p = kv.start
        while p < kv.end:
            p = self.field(p, kv.end, &number, &wire)
            if number == 2 and wire == LEN:
                p = self.delimited(p, kv.end, &body_end)
                parts.append(self.slice(p, body_end))
                p = body_end
            else:
                p = self.skip(p, kv.end, (number << 3) | wire, kv.depth)
        return _value(AnyValue.FromString(b"".join(parts)))

    cdef bytes slice(self, const uint8_t* p, const uint8_t* end):
        return PyBytes_FromStringAndSize(<const char*>p, end - p)

    # KeyValue: 1 key, 2 value, 3 key_strindex.

    cdef int key_value(
        self, const uint8_t* p, const uint8_t* end, int depth, KeyValue* kv
    ) except -1:
        """Check a KeyValue and note in `kv` what it holds."""
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        self.nested(p, depth)
        kv.start = p
        kv.end = end
        kv.key = p
        kv.key_size = 0
        kv.values = 0
        kv.depth = depth
        kv.kind = 0
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                kv.key = self.text(p, end, &body_end)
                kv.key_size = body_end - kv.key
                p = body_end
            elif number == 2 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                kv.kind = 0
                self.any_value(p, body_end, depth - 1, kv)
                kv.value = p
                kv.value_end = body_end
                kv.values += 1
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # AnyValue: 1 string_value, 2 bool_value, 3 int_value, 4 double_value,
    # 5 array_value, 6 kvlist_value, 7 bytes_value, 8 string_value_strindex: a oneof,
    # the last of them wins.

    cdef int any_value(
        self, const uint8_t* p, const uint8_t* end, int depth, KeyValue* kv
    ) except -1:
        """Check an AnyValue; with `kv`, note its last value field there."""
        cdef const uint8_t* body_end
        cdef const uint8_t* body
        cdef uint32_t number
        cdef int wire
        cdef uint64_t value
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                body = self.text(p, end, &body_end)
                if kv is not NULL:
                    kv.kind = 1
                    kv.text = body
                    kv.text_size = body_end - body
                p = body_end
            elif (number == 2 or number == 3 or number == 8) and wire == VARINT:
                p = self.varint(p, end, &value)
                if kv is not NULL:
                    kv.kind = number
                    kv.number = value
            elif number == 4 and wire == I64:
                p = self.fixed64(p, end, &value)
                if kv is not NULL:
                    kv.kind = 4
                    kv.number = value
            elif number == 5 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.check_values(p, body_end, depth - 1, False)
                if kv is not NULL:
                    kv.kind = 5
                p = body_end
            elif number == 6 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.check_values(p, body_end, depth - 1, True)
                if kv is not NULL:
                    kv.kind = 6
                p = body_end
            elif number == 7 and wire == LEN:
                self.delimited(p, end, &body_end)  # bytes: any bytes
                if kv is not NULL:
                    kv.kind = 7
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    cdef int check_values(
        self, const uint8_t* p, const uint8_t* end, int depth, bint pairs
    ) except -1:
        """ArrayValue (1: AnyValue values) or KeyValueList (1: KeyValue values)."""
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef KeyValue kv
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                if pairs:
                    self.key_value(p, body_end, depth - 1, &kv)
                else:
                    self.any_value(p, body_end, depth - 1, NULL)
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # Span.Event: 1 time_unix_nano, 2 name, 3 attributes, 4 dropped_attributes_count.

    cdef int span_event(self, const uint8_t* p, const uint8_t* end, int depth) except -1:
        cdef const uint8_t* body_end
        cdef const uint8_t* name = p
        cdef Py_ssize_t size = 0
        cdef uint32_t number
        cdef int wire
        cdef uint64_t time = 0
        cdef KeyValue kv
        cdef Event* event
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 1 and wire == I64:
                p = self.fixed64(p, end, &time)
            elif number == 2 and wire == LEN:
                name = self.text(p, end, &body_end)
                size = body_end - name
                p = body_end
            elif number == 3 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.key_value(p, body_end, depth - 1, &kv)
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        if self.event_count == self.event_capacity:
            event = <Event*>PyMem_Realloc(
                self.events, 2 * self.event_capacity * sizeof(Event)
            )
            if event is NULL:
                raise MemoryError()
            self.events = event
            self.event_capacity *= 2
        event = &self.events[self.event_count]
        event.time = time
        event.name = name
        event.size = size
        event.index = self.intern(name, size)
        self.event_count += 1
        return 0

    cdef int emit_events(self, Py_ssize_t span) except -1:
        """The span's events as `first_events` keeps them: each name once, at its
        earliest time, by time then name."""
        cdef Py_ssize_t i, kept = 0
        cdef Event* event
        cdef Entry* entry
        for i in range(self.event_count):
            event = &self.events[i]
            entry = &self.entries[event.index]
            if entry.event_span == span:
                if event.time < self.events[entry.event_pos].time:
                    self.events[entry.event_pos].time = event.time
                continue
            entry.event_span = span
            entry.event_pos = kept
            self.events[kept] = event[0]
            kept += 1
        if kept > 1:
            qsort(self.events, kept, sizeof(Event), _event_order)
        for i in range(kept):
            _push_u32(self.event_names, self.events[i].index)
            _push_u64(self.event_times, self.events[i].time)
        return 0

    # Span.Link: 1 trace_id, 2 span_id, 3 trace_state, 4 attributes,
    # 5 dropped_attributes_count, 6 flags.

    cdef int check_link(self, const uint8_t* p, const uint8_t* end, int depth) except -1:
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef KeyValue kv
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 3 and wire == LEN:
                self.text(p, end, &body_end)
                p = body_end
            elif number == 4 and wire == LEN:
                p = self.delimited(p, end, &body_end)
                self.key_value(p, body_end, depth - 1, &kv)
                p = body_end
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # Status: 2 message, 3 code.

    cdef int read_status(
        self, const uint8_t* p, const uint8_t* end, int depth, int32_t* code
    ) except -1:
        cdef const uint8_t* body_end
        cdef uint32_t number
        cdef int wire
        cdef uint64_t value
        self.nested(p, depth)
        while p < end:
            p = self.field(p, end, &number, &wire)
            if number == 2 and wire == LEN:
                self.text(p, end, &body_end)
                p = body_end
            elif number == 3 and wire == VARINT:
                p = self.varint(p, end, &value)
                code[0] = <int32_t>(<uint32_t>value)
            else:
                p = self.skip(p, end, (number << 3) | wire, depth)
        return 0

    # The records.

    cdef tuple columns(self):
        """The columns in `SpanRecords`' field order, the strings renumbered by first
        use (batches, span names, attribute keys and string values, event names) and the
        lists by row, so that both readers number them alike and leave unused ones out."""
        cdef Py_ssize_t* remap = <Py_ssize_t*>PyMem_Malloc(
            (self.count + 1) * sizeof(Py_ssize_t)
        )
        if remap is NULL:
            raise MemoryError()
        cdef list final = [], lists = []
        cdef Py_ssize_t i, n
        cdef unsigned int* refs
        cdef int* optional
        cdef uint8_t* types
        cdef long long* values
        try:
            memset(remap, 0xFF, (self.count + 1) * sizeof(Py_ssize_t))
            n = len(self.batch_services)
            for i in range(n):
                refs = self.batch_services.data.as_uints
                refs[i] = _renumber(remap, final, self.strings, refs[i])
                optional = self.batch_hosts.data.as_ints
                if optional[i] >= 0:
                    optional[i] = _renumber(remap, final, self.strings, optional[i])
                optional = self.batch_scopes.data.as_ints
                if optional[i] >= 0:
                    optional[i] = _renumber(remap, final, self.strings, optional[i])
            refs = self.span_names.data.as_uints
            for i in range(len(self.span_names)):
                refs[i] = _renumber(remap, final, self.strings, refs[i])
            refs = self.attr_keys.data.as_uints
            types = self.attr_types.data.as_uchars
            values = self.attr_values.data.as_longlongs
            for i in range(len(self.attr_keys)):
                refs[i] = _renumber(remap, final, self.strings, refs[i])
                if types[i] == STR:
                    values[i] = _renumber(remap, final, self.strings, values[i])
                elif types[i] == LIST:  # by row: a repeated key may have left one unused
                    lists.append(self.lists[values[i]])
                    values[i] = len(lists) - 1
            refs = self.event_names.data.as_uints
            for i in range(len(self.event_names)):
                refs[i] = _renumber(remap, final, self.strings, refs[i])
        finally:
            PyMem_Free(remap)
        return (
            self.data,
            tuple(final),
            self.trace_ids.tobytes(),
            self.span_ids.tobytes(),
            self.parent_ids.tobytes(),
            self.start_ns,
            self.end_ns,
            self.span_names,
            self.kinds,
            self.errors,
            self.batches,
            self.span_at,
            self.span_len,
            self.attr_bounds,
            self.attr_keys,
            self.attr_types,
            self.attr_values,
            tuple(lists),
            self.event_bounds,
            self.event_names,
            self.event_times,
            self.batch_services,
            self.batch_hosts,
            self.batch_scopes,
            self.batch_resource_at,
            self.batch_resource_len,
            self.batch_scope_at,
            self.batch_scope_len,
        )


cdef inline Py_ssize_t _renumber(
    Py_ssize_t* remap, list final, list strings, Py_ssize_t index
) except -1:
    if remap[index] < 0:
        remap[index] = len(final)
        final.append(strings[index])
    return remap[index]


# Appending to the columns: array.array's own growth, one value at a time.

cdef inline int _push_u8(array column, uint8_t value) except -1:
    cdef Py_ssize_t n = len(column)
    resize_smart(column, n + 1)
    column.data.as_uchars[n] = value
    return 0


cdef inline int _push_u32(array column, Py_ssize_t value) except -1:
    cdef Py_ssize_t n = len(column)
    resize_smart(column, n + 1)
    column.data.as_uints[n] = <unsigned int>value
    return 0


cdef inline int _push_i32(array column, Py_ssize_t value) except -1:
    cdef Py_ssize_t n = len(column)
    resize_smart(column, n + 1)
    column.data.as_ints[n] = <int>value
    return 0


cdef inline int _push_u64(array column, uint64_t value) except -1:
    cdef Py_ssize_t n = len(column)
    resize_smart(column, n + 1)
    column.data.as_ulonglongs[n] = value
    return 0


cdef inline int _push_i64(array column, int64_t value) except -1:
    cdef Py_ssize_t n = len(column)
    resize_smart(column, n + 1)
    column.data.as_longlongs[n] = value
    return 0


cdef inline int _push_bytes(
    array column, const uint8_t* p, Py_ssize_t size, Py_ssize_t width
) except -1:
    """An id, `width` bytes; zeros when it has another length (the read then fails, or
    it is a parent that is not there)."""
    cdef Py_ssize_t n = len(column)
    resize_smart(column, n + width)
    if size == width:
        memcpy(column.data.as_uchars + n, p, width)
    else:
        memset(column.data.as_uchars + n, 0, width)
    return 0


# The records' spans as `Span`s: `SpanRecords.to_spans` and `.spans_within`.

# Above this many attributes a span's are a dict: `Attributes` looks a key up in turn.
cdef Py_ssize_t _MAX_COMPACT = 12


@cython.final
@cython.no_gc
cdef class _Shape:
    """The keys of a span's attributes and their hashes, shared by the spans of a request
    that have the same keys."""

    cdef tuple keys
    cdef Py_hash_t* hashes

    def __cinit__(self, tuple keys):
        self.keys = keys
        self.hashes = <Py_hash_t*>PyMem_Malloc(max(1, len(keys)) * sizeof(Py_hash_t))
        if self.hashes is NULL:
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(len(keys)):
            self.hashes[i] = PyObject_Hash(keys[i])

    def __dealloc__(self):
        PyMem_Free(self.hashes)


# Not tracked by the garbage collector, as a dict of plain values is not: neither can be
# in a reference cycle (they hold strings, numbers and the protobuf package's values).
@cython.final
@cython.no_gc
cdef class Attributes:
    """A span's attributes as the wire reader makes them: a read-only mapping, in the
    order the span sent them, equal to the dict `spans_from_otlp` makes of the same span.

    A dict of one to five keys takes 184 bytes; this, 32 and a tuple of the values, its
    keys (and their hashes) being shared by the spans of a request that have the same
    keys (memory per open span, issue 46). A lookup compares the key's hash with the few
    keys' in turn, as a dict would its one slot; a span with more than `_MAX_COMPACT`
    attributes gets a dict. `keys()` is a view as a dict's; `values()` and `items()` are
    lists.
    """

    cdef _Shape _shape
    cdef tuple _values

    cdef inline Py_ssize_t _find(self, object key) except -2:
        cdef Py_hash_t h = PyObject_Hash(key)
        cdef Py_hash_t* hashes = self._shape.hashes
        cdef tuple keys = self._shape.keys
        cdef Py_ssize_t i
        for i in range(len(keys)):
            if hashes[i] == h and (keys[i] is key or keys[i] == key):
                return i
        return -1

    def __len__(self):
        return len(self._values)

    def __iter__(self):
        return iter(self._shape.keys)

    def __contains__(self, key):
        return self._find(key) >= 0

    def __getitem__(self, key):
        cdef Py_ssize_t i = self._find(key)
        if i < 0:
            raise KeyError(key)
        return self._values[i]

    def get(self, key, default=None):
        cdef Py_ssize_t i = self._find(key)
        return default if i < 0 else self._values[i]

    def keys(self):
        return _KeysView(self)

    def values(self):
        return list(self._values)

    def items(self):
        return list(zip(self._shape.keys, self._values))

    def copy(self):
        """A dict of the same items (what JSON writers and callers that change it take)."""
        cdef dict out = {}
        cdef tuple keys = self._shape.keys
        cdef tuple values = self._values
        cdef Py_ssize_t i
        for i in range(len(values)):
            PyDict_SetItem(out, keys[i], values[i])
        return out

    def __eq__(self, other):
        if isinstance(other, Attributes):
            return self.copy() == (<Attributes>other).copy()
        if isinstance(other, _Mapping):
            return self.copy() == dict(other.items())
        return NotImplemented

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self):
        raise TypeError("unhashable type: 'Attributes'")  # as a dict: a Span is not either

    def __or__(self, other):
        if not isinstance(other, _Mapping):
            return NotImplemented
        merged = self.copy()
        merged.update(other)
        return merged

    def __repr__(self):
        return repr(self.copy())

    def __reduce__(self):  # pickled, it comes back a dict
        return (dict, (self.items(),))


_Mapping.register(Attributes)
cdef Attributes _NO_ATTRIBUTES = Attributes.__new__(Attributes)
_NO_ATTRIBUTES._shape = _Shape(())
_NO_ATTRIBUTES._values = ()


cdef inline object _attributes(
    tuple values, const unsigned int* key_ids, tuple strings, dict shapes
):
    """A span's attributes, `values` under the keys `strings` holds at `key_ids` (one per
    value): one shared empty mapping, `Attributes` sharing the keys' shape through `shapes`
    (the request's, found by those indices without making a tuple of the keys), or a dict
    for many keys."""
    cdef Py_ssize_t n = len(values), i
    if n == 0:
        return _NO_ATTRIBUTES
    if n > _MAX_COMPACT:
        return {strings[key_ids[i]]: values[i] for i in range(n)}
    cdef bytes ids = PyBytes_FromStringAndSize(<const char*>key_ids, n * sizeof(unsigned int))
    cdef object shape = shapes.get(ids)
    if shape is None:
        shape = shapes[ids] = _Shape(tuple([strings[key_ids[i]] for i in range(n)]))
    cdef Attributes out = Attributes.__new__(Attributes)
    out._shape = <_Shape>shape
    out._values = values
    PyObject_GC_UnTrack(values)  # plain values, as `Span` below: never in a cycle
    return out


include "../_slots.pxi"

cdef tuple _KINDS = tuple(SpanKind.from_otlp(number) for number in range(6))
# Where a `Span` keeps each field (`_slots.pxi`); `spans` fills every one of them.
cdef tuple _SPAN_FIELDS = (
    "trace_id", "span_id", "name", "start_ns", "end_ns", "parent_span_id", "kind", "service",
    "attributes", "error", "events", "host", "scope",
)
if tuple(f.name for f in _dataclass_fields(Span)) != _SPAN_FIELDS:
    raise RuntimeError("Span's fields changed: update _wire.pyx")
cdef Py_ssize_t _TRACE_ID, _SPAN_ID, _NAME, _START, _END, _PARENT, _KIND, _SERVICE
cdef Py_ssize_t _ATTRIBUTES, _ERROR, _EVENTS, _HOST, _SCOPE
(_TRACE_ID, _SPAN_ID, _NAME, _START, _END, _PARENT, _KIND, _SERVICE, _ATTRIBUTES, _ERROR,
 _EVENTS, _HOST, _SCOPE) = _slot_offsets(Span, _SPAN_FIELDS)
cdef object _new_span = object.__new__
cdef object _new_tuple = tuple.__new__
cdef object _Span = Span
cdef object _SpanEvent = SpanEvent
cdef const char* _HEX = b"0123456789abcdef"


cdef inline str _hex(const uint8_t* p, Py_ssize_t n):
    cdef char text[32]  # ids are 16 bytes at most
    cdef Py_ssize_t i
    for i in range(n):
        text[2 * i] = _HEX[p[i] >> 4]
        text[2 * i + 1] = _HEX[p[i] & 15]
    return PyUnicode_DecodeASCII(text, 2 * n, NULL)


cdef inline bint _zeros(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i]:
            return False
    return True


def span_rows(list spans):
    """The span store's rows of one trace's `spans` (`span_store.span_rows`, which holds
    the Python that this is held equal to): each `Span`'s fields in the stored order, its
    kind's value, its attributes as a dict, its events as lists; None where one of them is
    not a `Span` itself (a subclass's fields are read by the Python)."""
    cdef list out = []
    cdef Py_ssize_t n = len(spans), i
    for i in range(n):
        if type(spans[i]) is not _Span:
            return None
    for i in range(n):
        span = spans[i]
        attributes = _get_slot(span, _ATTRIBUTES)
        if type(attributes) is Attributes:
            attributes = (<Attributes>attributes).copy()
        elif type(attributes) is not dict:
            attributes = dict(attributes)
        events = _get_slot(span, _EVENTS)
        out.append([
            _get_slot(span, _SPAN_ID),
            _get_slot(span, _PARENT),
            _get_slot(span, _NAME),
            _get_slot(span, _START),
            _get_slot(span, _END),
            _get_slot(span, _KIND)._value_,
            _get_slot(span, _SERVICE),
            attributes,
            _get_slot(span, _ERROR),
            _get_slot(span, _HOST),
            [list(event) for event in events] if events else (),
            _get_slot(span, _SCOPE),
        ])
    return out


cdef dict _WRAPS = {}  # class -> where its objects keep their fields


def wrap_each(cls, list items):
    """`[cls(item) for item in items]`, out of the cycle collector's sight, for a slotted
    dataclass whose first field takes the item and whose others default to None (the
    intake's `HeldSpan`), made slot by slot (`_slots.pxi`)."""
    cdef tuple at = _WRAPS.get(cls)
    if at is None:
        fields = _dataclass_fields(cls)
        if hasattr(cls, "__post_init__") or any(f.default is not None for f in fields[1:]):
            raise TypeError(f"{cls.__name__}'s fields past its first do not default to None")
        at = _WRAPS[cls] = _slot_offsets(cls, tuple(f.name for f in fields))
    cdef Py_ssize_t k, width = len(at)
    cdef list out = []
    for item in items:
        obj = _new_span(cls)
        _set_slot(obj, at[0], item)
        for k in range(1, width):
            _set_slot(obj, at[k], None)
        PyObject_GC_UnTrack(obj)
        out.append(obj)
    return out


def spans(records, Py_ssize_t max_span_bytes=-1):
    """`records`' spans, as `SpanRecords.span` makes each, and what each trace lost:
    with `max_span_bytes` of 0 or more, spans whose own encoding is longer are left out
    and counted by trace id. The spans of one trace share its id's string, and a parent
    id in the request is its span id's string."""
    cdef tuple strings = records.strings
    cdef tuple lists = records.lists
    cdef bytes trace_bytes = records.trace_ids
    cdef bytes span_bytes = records.span_ids
    cdef bytes parent_bytes = records.parent_ids
    cdef const uint8_t* trace_ids = <const uint8_t*>PyBytes_AS_STRING(trace_bytes)
    cdef const uint8_t* span_ids = <const uint8_t*>PyBytes_AS_STRING(span_bytes)
    cdef const uint8_t* parent_ids = <const uint8_t*>PyBytes_AS_STRING(parent_bytes)
    cdef array a_start = records.start_ns, a_end = records.end_ns, a_names = records.names
    cdef array a_kinds = records.kinds, a_errors = records.errors, a_batches = records.batches
    cdef array a_len = records.span_len, a_attr_bounds = records.attr_bounds
    cdef array a_attr_keys = records.attr_keys, a_attr_types = records.attr_types
    cdef array a_attr_values = records.attr_values, a_event_bounds = records.event_bounds
    cdef array a_event_names = records.event_names, a_event_times = records.event_times
    cdef array a_services = records.batch_services, a_hosts = records.batch_hosts
    cdef array a_scopes = records.batch_scopes
    cdef unsigned int* attr_bounds = a_attr_bounds.data.as_uints
    cdef unsigned int* attr_keys = a_attr_keys.data.as_uints
    cdef unsigned char* attr_types = a_attr_types.data.as_uchars
    cdef long long* attr_values = a_attr_values.data.as_longlongs
    cdef unsigned int* event_bounds = a_event_bounds.data.as_uints
    cdef unsigned int* event_names = a_event_names.data.as_uints
    cdef unsigned long long* event_times = a_event_times.data.as_ulonglongs
    cdef Py_ssize_t n = len(a_names), i, row, batch, host, scope, kind
    cdef list out = []
    cdef dict lost = {}
    cdef dict shapes = {}  # each distinct run of attribute keys, once a request
    cdef tuple values_tuple, events
    cdef unsigned int first, count
    cdef str trace_id = None
    cdef const uint8_t* last_trace = NULL
    cdef dict trace_strings = {}  # each trace id's string, once a request
    cdef bytes key
    # Each span id's string, which its children's parent ids share.
    cdef dict span_strings = {}
    cdef list span_texts = [None] * n
    cdef uint64_t id_bits
    cdef str text
    for i in range(n):
        memcpy(&id_bits, span_ids + 8 * i, 8)
        text = span_texts[i] = _hex(span_ids + 8 * i, 8)
        span_strings[id_bits] = text
    cdef object span, value
    cdef long long payload
    cdef double number
    for i in range(n):
        if trace_id is None or memcmp(last_trace, trace_ids + 16 * i, 16) != 0:
            last_trace = trace_ids + 16 * i
            key = PyBytes_FromStringAndSize(<const char*>last_trace, 16)
            trace_id = trace_strings.get(key)
            if trace_id is None:
                trace_id = trace_strings[key] = _hex(last_trace, 16)
        if max_span_bytes >= 0 and <Py_ssize_t>a_len.data.as_uints[i] > max_span_bytes:
            lost[trace_id] = lost.get(trace_id, 0) + 1
            continue
        first, count = attr_bounds[i], attr_bounds[i + 1] - attr_bounds[i]
        values_tuple = PyTuple_New(count)
        for row in range(count):
            payload = attr_values[first + row]
            kind = attr_types[first + row]
            if kind == STR:
                value = strings[payload]
            elif kind == BOOL:
                value = payload != 0
            elif kind == INT:
                value = payload
            elif kind == DOUBLE:
                memcpy(&number, &payload, 8)
                value = number
            else:
                value = lists[payload]
            Py_INCREF(value)
            PyTuple_SET_ITEM(values_tuple, row, value)
        if event_bounds[i] == event_bounds[i + 1]:
            events = ()
        else:
            events = tuple([
                _new_tuple(_SpanEvent, (strings[event_names[row]], event_times[row]))
                for row in range(event_bounds[i], event_bounds[i + 1])
            ])
        batch = a_batches.data.as_uints[i]
        host = a_hosts.data.as_ints[batch]
        scope = a_scopes.data.as_ints[batch]
        span = _new_span(_Span)
        _set_slot(span, _TRACE_ID, trace_id)
        _set_slot(span, _SPAN_ID, span_texts[i])
        _set_slot(span, _NAME, strings[a_names.data.as_uints[i]])
        _set_slot(span, _START, a_start.data.as_ulonglongs[i])
        _set_slot(span, _END, a_end.data.as_ulonglongs[i])
        if _zeros(parent_ids + 8 * i, 8):
            value = None
        else:
            memcpy(&id_bits, parent_ids + 8 * i, 8)
            value = span_strings.get(id_bits)
            if value is None:
                value = _hex(parent_ids + 8 * i, 8)
        _set_slot(span, _PARENT, value)
        _set_slot(span, _KIND, _KINDS[a_kinds.data.as_uchars[i]])
        _set_slot(span, _SERVICE, strings[a_services.data.as_uints[batch]])
        _set_slot(span, _ATTRIBUTES, _attributes(
            values_tuple, attr_keys + first, strings, shapes
        ))
        _set_slot(span, _ERROR, a_errors.data.as_uchars[i] == 1)
        _set_slot(span, _EVENTS, events)
        _set_slot(span, _HOST, None if host < 0 else strings[host])
        _set_slot(span, _SCOPE, None if scope < 0 else strings[scope])
        # Out of the cycle collector's sight, as a dict of plain values is: a `Span` holds
        # strings, numbers, its kind, `Attributes` and events, none of which can lead back
        # to it, so it is never in a cycle; reference counting frees it. The collector's
        # assembly holds hundreds of thousands of them, which every collection of the
        # young generation would otherwise traverse (bench/pipeline.py: a fifteenth of the
        # default configuration's time went to those collections).
        PyObject_GC_UnTrack(span)
        out.append(span)
    return out, lost
