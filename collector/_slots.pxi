# Fields of a slotted class written and read where its member descriptors keep them: what
# `object.__setattr__` and attribute access come to for such a field, without the
# attribute look-up and the descriptor's call. Written only on an object just made
# (`tp_alloc` left every slot empty): an old value would not be released; read only where
# every slot is filled (a `Span`'s). Included by the compiled wire reader and the compiled
# evaluator, which make a `Span`, a verdict and its stage results so, and read `Span`s.

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    int T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

import types as _types


cdef Py_ssize_t _slot_offset(object cls, str name) except -1:
    """Where the objects of `cls` keep slot `name` (a TypeError for anything else)."""
    descriptor = getattr(cls, name)
    if type(descriptor) is not _types.MemberDescriptorType:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    cdef PyMemberDef* member = (<PyMemberDescrObject*>descriptor).d_member
    if member.type != T_OBJECT_EX:
        raise TypeError(f"{cls.__name__}.{name} is not an object slot")
    return member.offset


cdef tuple _slot_offsets(object cls, tuple names):
    return tuple(_slot_offset(cls, name) for name in names)


cdef inline void _set_slot(object obj, Py_ssize_t offset, object value) noexcept:
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + offset))[0] = <PyObject*>value


cdef inline object _get_slot(object obj, Py_ssize_t offset):
    return <object>(<PyObject**>((<char*><PyObject*>obj) + offset))[0]
