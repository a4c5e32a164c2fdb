"""How a module declares its tables and reducers, and the definitions the runtime reads.

A table is a `msgspec.Struct` whose columns carry markers in `Annotated[...]`:
`PrimaryKey(auto_inc=...)`, `Unique()`, `Index()`. Multi-column btree indexes are declared on
the table (`indexes={"by_owner_item": ("owner", "item")}`). A reducer is a plain function
`(ctx, *args)`; its parameter annotations are its argument types.
"""

from __future__ import annotations

import enum
import functools
import inspect
import operator
import re
import types as pytypes
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import blake3
import msgspec

from . import codec, keys
from .errors import SchemaError
from .rowformat import RowFormat
from .types import ConnectionId, Identity, TimeDuration, Timestamp

# --- column markers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrimaryKey:
    """The table's primary key. With auto_inc, inserting 0 takes the next value of a sequence."""

    auto_inc: bool = False


@dataclass(frozen=True)
class Unique:
    """A unique column: `find`, `delete` by it; inserting a duplicate raises."""


@dataclass(frozen=True)
class Index:
    """A btree index: `filter` by value, prefix or range. As a column's marker
    (`Annotated[str, Index()]`) it indexes that column; in a table's `indexes=` it names the
    columns of a multi-column index (`Index(("owner", "item"))`; a plain tuple says the same).

    `sparse=True`: a row whose indexed value is None (for several columns: whose first column is
    None) gets no entry, as PostgreSQL's partial index `WHERE col IS NOT NULL`; a column that is
    mostly None then costs a write nothing. Reads stay right: a `filter` that can match None
    reads the table's rows instead (docs/modules.md, "Sparse indexes").

    `only=(v1, v2, ...)`: a partial index, PostgreSQL's `WHERE col IN (v1, v2, ...)` on its first
    column: a row gets an entry only while that column holds one of these values. A walk that
    fixes the first column to one of them reads the index; any other reads the table's rows, so
    answers stay those of a dense index (docs/modules.md, "Partial indexes")."""

    columns: tuple[str, ...] = ()
    sparse: bool = False
    only: tuple[Any, ...] = ()


_NONE_KEY = keys.encode_value(None)
_NONE_END = keys.prefix_end(_NONE_KEY)
_KEYABLE = (int, str, bytes, bool, float, Identity, ConnectionId, Timestamp, TimeDuration)

ReducerKind = Literal["reducer", "init", "client_connected", "client_disconnected", "scheduled"]
LIFECYCLE: tuple[ReducerKind, ...] = ("init", "client_connected", "client_disconnected")
TABLE_METHODS = frozenset({"insert", "try_insert", "iter", "count", "delete", "update", "clear", "delete_first", "definition"})


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def type_name(tp: Any) -> str:
    """A stable description of a column type, stored with the schema to detect changes."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return type_name(typing.get_args(tp)[0])
    if origin in (typing.Union, pytypes.UnionType):
        return " | ".join(sorted(type_name(a) for a in typing.get_args(tp)))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if tp is type(None):
        return "None"
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return f"enum {tp.__name__}({', '.join(repr(m.value) for m in tp)})"
        return tp.__name__
    return repr(tp)


def _keyable(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, pytypes.UnionType):
        return all(a is type(None) or _keyable(a) for a in typing.get_args(tp))
    if origin is Literal:
        return True
    return isinstance(tp, type) and (issubclass(tp, _KEYABLE) or issubclass(tp, enum.Enum))


def _immutable(tp: Any, seen: frozenset[Any] = frozenset()) -> bool:
    """Whether a value of type `tp` cannot change once built: a keyable scalar, an enum, None, a
    tuple of such, or a frozen Struct of such (so one decoded row may be shared between calls)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _immutable(typing.get_args(tp)[0], seen)
    if origin in (typing.Union, pytypes.UnionType):
        return all(_immutable(a, seen) for a in typing.get_args(tp))
    if origin is tuple:
        return all(a is Ellipsis or _immutable(a, seen) for a in typing.get_args(tp))
    if tp is type(None) or origin is Literal:
        return True
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp in seen or not tp.__struct_config__.frozen:
            return False
        return all(_immutable(h, seen | {tp}) for h in typing.get_type_hints(tp, include_extras=True).values())
    return _keyable(tp)


def _optional(tp: Any) -> bool:
    """Whether a column of type `tp` may hold None."""
    if typing.get_origin(tp) is typing.Annotated:
        return _optional(typing.get_args(tp)[0])
    return tp is type(None) or (typing.get_origin(tp) in (typing.Union, pytypes.UnionType) and type(None) in typing.get_args(tp))


# --- tables ----------------------------------------------------------------------------------------


@dataclass
class ColumnDef:
    name: str
    type: Any
    position: int
    has_default: bool


@dataclass
class IndexDef:
    name: str
    columns: tuple[str, ...]
    unique: bool
    positions: tuple[int, ...] = ()
    # no entry for a row whose first indexed column is None (`Index(sparse=True)`)
    sparse: bool = False
    # entries only for rows whose first indexed column holds one of these (`Index(only=...)`)
    only: tuple[Any, ...] = ()
    # set with `positions`: the indexed values of a row tuple (a value for one column, else a
    # tuple), and the key encoder for that shape; write_row runs these for every index
    values: Any = field(default=None, init=False, repr=False, compare=False)
    encode: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.partial = self.sparse or bool(self.only)  # some rows have no entry
        self.kept = frozenset(self.only)  # membership of a row's value (of the column's type)
        # a walk inside one of these key prefixes reads only rows that have entries
        self._kept_keys = frozenset(keys.encode_value(v) for v in self.only)
        self._kept_prefixes = [(k, keys.prefix_end(k)) for k in sorted(self._kept_keys)]

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"columns": list(self.columns), "unique": self.unique}
        if self.sparse:  # only when set: the stored schemas of existing indexes stay as they were
            described["sparse"] = True
        if self.only:
            described["only"] = codec.to_builtins(list(self.only))
        return described

    def leaves_out(self, vals: tuple[Any, ...]) -> bool:
        """Whether a row (its column values) has no entry in this index: a sparse one's None, a
        partial one's value outside `only`."""
        if self.only:
            return vals[self.positions[0]] not in self.kept
        return self.sparse and vals[self.positions[0]] is None

    def holds(self, first: Any) -> bool:
        """Whether rows whose first indexed column is `first` have entries (a walk fixing it to
        `first` may read the index)."""
        if self.only:
            return keys.encode_value(first) in self._kept_keys
        return not (self.sparse and first is None)

    def may_leave_out(self, start: bytes, stop: bytes | None) -> bool:
        """Whether index keys in [start, stop) may belong to rows this index has no entry for,
        so that a walk of that range must read the table's rows instead."""
        if self.only:  # a loop, not any() over a generator: every claim asks (by_claim)
            for lo, hi in self._kept_prefixes:
                if lo <= start and (hi is None or (stop is not None and stop <= hi)):
                    return False
            return True
        return self.sparse and (_NONE_END is None or start < _NONE_END) and (stop is None or stop > _NONE_KEY)

    def locate(self, positions: tuple[int, ...]) -> None:
        self.positions = positions
        self.values = operator.itemgetter(*positions)
        self.encode = keys.encode_value if len(positions) == 1 else keys.encode_key


@dataclass
class TableDef:
    name: str
    row_type: type[msgspec.Struct]
    columns: list[ColumnDef]
    primary_key: str | None
    auto_inc: bool
    indexes: dict[str, IndexDef]
    public: bool
    scheduled: str | None = None
    event: bool = False  # rows live only inside their transaction (runtime/transaction.py)
    # read far more often than written (roles, settings): the writer keeps the rows its reducers
    # read by key between calls (runtime/transaction.py, `RowCache`); not part of the stored schema
    cached: bool = False
    row_format: RowFormat = field(init=False, repr=False)  # the rows' stored bytes

    def __post_init__(self) -> None:
        self.row_format = _row_format(self.row_type)
        # A cached table of rows that cannot change once built (a frozen Struct of immutable
        # values) hands out one decoded row for as long as its stored bytes stay cached.
        self.shares_rows = self.cached and _immutable(self.row_type)
        by_name = {c.name: c.position for c in self.columns}
        self.columns_by_name = by_name
        for ix in self.indexes.values():
            ix.locate(tuple(by_name[c] for c in ix.columns))
        self.unique_indexes = [ix for ix in self.indexes.values() if ix.unique]
        self.indexed_positions = tuple(sorted({p for ix in self.indexes.values() for p in ix.positions}))
        self.pk_position = by_name[self.primary_key] if self.primary_key else -1
        # the primary key seen as a unique index, for `ctx.db.<table>.<pk>` accessors
        self.pk_index: IndexDef | None = None
        # `row_key(values)`: the storage key of a row (its column values); `row_id(values)`: what
        # tells two rows apart (the primary key's value). A table without a primary key is a set
        # of whole rows (SpacetimeDB): both are a hash of every column.
        self.row_key: Callable[[tuple[Any, ...]], bytes] = _whole_row_key
        self.row_id: Callable[[tuple[Any, ...]], Any] = _whole_row_key
        if self.primary_key:
            self.pk_index = IndexDef(self.primary_key, (self.primary_key,), True)
            self.pk_index.locate((self.pk_position,))
            self.row_id = operator.itemgetter(self.pk_position)
            self.row_key = _pk_key(self.pk_position)

    def describe(self) -> dict[str, Any]:
        """The stored form of the schema; comparing two tells whether data can be reused."""
        described = {
            "name": self.name,
            "columns": [{"name": c.name, "type": type_name(c.type), "has_default": c.has_default} for c in self.columns],
            "primary_key": self.primary_key,
            "auto_inc": self.auto_inc,
            "indexes": {n: ix.describe() for n, ix in sorted(self.indexes.items())},
            "public": self.public,
            "scheduled": self.scheduled,
        }
        if self.event:  # only when set, so the stored schemas of existing tables stay as they were
            described["event"] = True
        return described


@functools.cache
def _row_format(row_type: type[msgspec.Struct]) -> RowFormat:
    """One RowFormat a row type (immutable; building one reads the type's fields and builds a
    decoder: ~1 ms, and a module declaring its tables again reuses them)."""
    return RowFormat(row_type)


def _whole_row_key(values: tuple[Any, ...]) -> bytes:
    """The key of a row of a table without a primary key: 16 bytes of BLAKE3 over its encoded
    columns. Equal rows get one key (set semantics, as SpacetimeDB's whole-row identity); keys
    stay short whatever the row's size (LMDB's keys are at most 511 bytes)."""
    return blake3.blake3(codec.msgpack_encoder.encode(values)).digest(16)


def _pk_key(position: int) -> Callable[[tuple[Any, ...]], bytes]:
    def key(values: tuple[Any, ...]) -> bytes:
        return keys.encode_value(values[position])

    return key


def _holds_float(tp: Any) -> bool:
    if typing.get_origin(tp) in (typing.Union, pytypes.UnionType):
        return any(_holds_float(a) for a in typing.get_args(tp))
    return tp is float


def _only(tname: str, ix_name: str, first_type: Any, ix: Index) -> tuple[Any, ...]:
    """A partial index's values, each as a value of its first column's type."""
    if not ix.only:
        return ()
    if ix.sparse:
        raise SchemaError(f"{tname}.{ix_name}: an index is sparse or partial (`only=`), not both (None is left out unless `only` names it)")
    if _holds_float(first_type):
        # a row's value is kept by equality, and -0.0 == 0.0 while their keys differ
        raise SchemaError(f"{tname}.{ix_name}: a partial index's first column may not be a float")
    values = []
    for v in ix.only:
        try:
            values.append(codec.convert(v, first_type))
        except (msgspec.ValidationError, TypeError) as e:
            raise SchemaError(f"{tname}.{ix_name}: only={v!r} is not a value of its first column ({e})") from None
    if len({keys.encode_value(v) for v in values}) != len(values):
        raise SchemaError(f"{tname}.{ix_name}: only= names a value twice")
    return tuple(values)


def build_table(
    row_type: type,
    *,
    name: str | None,
    public: bool,
    indexes: Mapping[str, tuple[str, ...] | Index] | None,
    scheduled: str | None,
    event: bool = False,
    cached: bool = False,
) -> TableDef:
    if not (isinstance(row_type, type) and issubclass(row_type, msgspec.Struct)):
        raise SchemaError(f"a table must be a msgspec.Struct, not {row_type!r}")
    tname = name or snake_case(row_type.__name__)
    if not tname.isidentifier():
        raise SchemaError(f"table name {tname!r} is not an identifier")
    config = row_type.__struct_config__
    if config.array_like and config.tag is not None:
        # stored rows are arrays of the column values (rowformat.py); such a type's own arrays
        # began with its tag, which a stored row of an earlier version could not be told from
        raise SchemaError(f"table {tname}: a row type may not be a tagged array_like Struct")
    hints = typing.get_type_hints(row_type, include_extras=True)
    fields = msgspec.structs.fields(row_type)
    columns: list[ColumnDef] = []
    ixs: dict[str, IndexDef] = {}
    pk: str | None = None
    auto_inc = False
    for pos, f in enumerate(fields):
        hint = hints[f.name]
        markers: tuple[Any, ...] = ()
        base = hint
        if typing.get_origin(hint) is typing.Annotated:
            base, *rest = typing.get_args(hint)
            markers = tuple(rest)
        has_default = f.default is not msgspec.NODEFAULT or f.default_factory is not msgspec.NODEFAULT
        columns.append(ColumnDef(f.name, base, pos, has_default))
        for m in markers:
            if isinstance(m, (PrimaryKey, Unique, Index)) and not _keyable(base):
                raise SchemaError(f"{tname}.{f.name}: a column of type {type_name(base)} cannot be indexed")
            if isinstance(m, PrimaryKey):
                if pk is not None:
                    raise SchemaError(f"table {tname} declares two primary keys ({pk}, {f.name})")
                pk, auto_inc = f.name, m.auto_inc
                if auto_inc and base is not int:
                    raise SchemaError(f"{tname}.{f.name}: auto_inc needs an int column")
            elif isinstance(m, Unique):
                ixs[f.name] = IndexDef(f.name, (f.name,), unique=True)
            elif isinstance(m, Index):
                if m.columns:
                    raise SchemaError(f"{tname}.{f.name}: Index() on a column names no columns (it indexes that one)")
                ixs[f.name] = IndexDef(f.name, (f.name,), unique=False, sparse=m.sparse, only=_only(tname, f.name, base, m))
    for ix_name, spec in (indexes or {}).items():
        sparse = isinstance(spec, Index) and spec.sparse
        only = spec.only if isinstance(spec, Index) else ()
        cols = tuple(spec.columns if isinstance(spec, Index) else spec)
        if not cols or not all(isinstance(c, str) for c in cols):
            raise SchemaError(f"index {tname}.{ix_name} must name its columns (a tuple of column names)")
        unknown = [c for c in cols if c not in {c.name for c in columns}]
        if unknown:
            raise SchemaError(f"index {tname}.{ix_name} names unknown columns {unknown}")
        for c in cols:
            if not _keyable(hints[c] if typing.get_origin(hints[c]) is not typing.Annotated else typing.get_args(hints[c])[0]):
                raise SchemaError(f"{tname}.{c} cannot be part of index {ix_name}")
        if ix_name in ixs or ix_name == pk:
            raise SchemaError(f"table {tname} has two indexes named {ix_name}")
        first_type = next(c.type for c in columns if c.name == cols[0])
        ixs[ix_name] = IndexDef(ix_name, cols, unique=False, sparse=sparse, only=_only(tname, ix_name, first_type, Index(cols, sparse, only)))
    for ix in ixs.values():
        first = next(c for c in columns if c.name == ix.columns[0])
        if ix.sparse and not _optional(first.type):
            raise SchemaError(f"{tname}.{ix.name}: a sparse index leaves out rows whose {first.name} is None, and it is never None")
    for n in [*([pk] if pk else []), *ixs]:
        if n in TABLE_METHODS or n.startswith("_"):
            raise SchemaError(f"{tname}.{n}: an index accessor may not be named {n!r}")
    if scheduled is not None:
        names = {c.name: c for c in columns}
        if pk != "scheduled_id" or "scheduled_at" not in names:
            raise SchemaError(
                f"schedule table {tname} needs a primary key `scheduled_id` and a column `scheduled_at: ScheduleAt`"
            )
    if event and scheduled is not None:
        raise SchemaError(f"table {tname}: an event table cannot be a schedule table (its rows never outlive the transaction)")
    try:
        table = TableDef(tname, row_type, columns, pk, auto_inc, ixs, public, scheduled, event, cached)
    except TypeError as e:
        raise SchemaError(f"table {tname}: {e}") from None
    return table


# --- reducers --------------------------------------------------------------------------------------


@dataclass
class ReducerDef:
    name: str
    func: Callable[..., Any]
    kind: ReducerKind
    params: list[tuple[str, Any, Any]]
    # `spread`: the function takes one instance of this Struct, whose fields are the reducer's
    # parameters (`Module.reducer(spread=True)`)
    spread: type[msgspec.Struct] | None = None
    # a procedure (runtime/procedures.py): runs outside the writer, on the procedure pool
    procedure: bool = False
    args_type: type[msgspec.Struct] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        spec = [(n, t) if d is inspect.Parameter.empty else (n, t, d) for n, t, d in self.params]
        try:
            self.args_type = msgspec.defstruct(f"{self.name}_args", spec, array_like=True, forbid_unknown_fields=True)
            self.json_decoder = codec.json_decoder(self.args_type)
            self.msgpack_decoder = codec.msgpack_decoder(self.args_type)
        except TypeError as e:
            raise SchemaError(f"reducer {self.name}: {e}") from None
        # What the runtime calls with (ctx, *arguments in parameter order).
        self.call: Callable[..., Any] = self.func if self.spread is None else _spreading(self.func, self.spread)
        # The check of Python values that needs no conversion (runtime/calls.py): per parameter,
        # the exact types taken as they are (None: any value), and every default.
        self.exact_types: tuple[frozenset[type] | None, ...] = tuple(_exact_types(t) for _, t, _ in self.params)
        self.required = sum(1 for _, _, d in self.params if d is inspect.Parameter.empty)
        self.defaults: tuple[Any, ...] | None = (
            tuple(d for _, _, d in self.params[self.required :])
            if all(type(d) in _IMMUTABLE for _, _, d in self.params[self.required :])
            and all(d is inspect.Parameter.empty for _, _, d in self.params[: self.required])
            else None
        )
        self._object_decoder: msgspec.json.Decoder[Any] | None = None

    def decode_json_object(self, body: bytes) -> msgspec.Struct:
        """The arguments from a JSON object keyed by parameter name (SATS-JSON's other form of a
        product, beside the array): an instance of `args_type`. Raises msgspec's errors."""
        if self._object_decoder is None:  # made on first use: most reducers are called with arrays
            spec = [(n, t) if d is inspect.Parameter.empty else (n, t, d) for n, t, d in self.params]
            keyed = msgspec.defstruct(f"{self.name}_kwargs", spec, forbid_unknown_fields=True)
            self._object_decoder = codec.json_decoder(keyed)
        return self.args_type(*msgspec.structs.astuple(self._object_decoder.decode(body)))

    @property
    def client_callable(self) -> bool:
        return self.kind == "reducer"

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "params": [{"name": n, "type": type_name(t), "required": d is inspect.Parameter.empty} for n, t, d in self.params],
        }
        if self.procedure:  # only when set: the stored schemas of existing modules stay as they were
            described["procedure"] = True
        return described

    def signature(self) -> str:
        """`name(a: int, b: str | None = None)`: the parameters as a caller passes them."""
        return f"{self.name}({', '.join(param_text(n, t, d) for n, t, d in self.params)})"

    def explain(self, error: msgspec.MsgspecError) -> str:
        """An argument error in the caller's terms: the parameter by name (not msgspec's `$[0]`),
        what is missing, or the signature when there are too many."""
        text = str(error)
        at = _AT.match(text)
        if at and int(at["index"]) < len(self.params):
            return f"{self.name}: argument {self.params[int(at['index'])][0]}{at['rest']}: {at['message']}"
        few = _TOO_FEW.match(text)
        if few:
            missing = [n for n, _, d in self.params[int(few["got"]) :] if d is inspect.Parameter.empty]
            return f"{self.name}: missing argument {', '.join(missing)}; it takes {self.signature()}"
        if _TOO_MANY.match(text):
            return f"{self.name}: too many arguments; it takes {self.signature()}"
        return f"{self.name}: {text}"


# msgspec's messages for an array-like Struct of arguments, which `explain` rewrites.
_AT = re.compile(r"^(?P<message>.*) - at `\$\[(?P<index>\d+)\](?P<rest>.*)`$", re.S)
_TOO_FEW = re.compile(r"^Expected `array` of at least length \d+, got (?P<got>\d+)$")
_TOO_MANY = re.compile(r"^Expected `array` of at most length \d+")


def shown_type(tp: Any) -> str:
    """A parameter's or column's type as a reader writes it (`str | None`, None last)."""
    parts = type_name(tp).split(" | ")
    return " | ".join([p for p in parts if p != "None"] + [p for p in parts if p == "None"])


def param_text(name: str, tp: Any, default: Any) -> str:
    """`name: type` or `name: type = default`."""
    if default is inspect.Parameter.empty:
        return f"{name}: {shown_type(tp)}"
    if isinstance(default, _FIELD):  # a default made per call (`_default_of`)
        factory = default.default_factory
        shown = f"{getattr(factory, '__name__', 'factory')}()"
    else:
        shown = repr(default)
    return f"{name}: {shown_type(tp)} = {shown}"


_FIELD = type(msgspec.field())


# Values msgspec.convert returns as they are (no copy, no check beyond the type): a call's
# argument of one of these exact types, where its parameter takes that type, needs no conversion.
_IMMUTABLE = frozenset({type(None), bool, int, float, str, bytes})
_AS_IS = _IMMUTABLE | {Identity, ConnectionId}


def _exact_types(tp: Any) -> frozenset[type] | None:
    """The exact types a parameter of type `tp` takes unconverted, or None for `Any` (every
    value); an empty set where every value needs msgspec's check (constraints, literals, enums,
    containers, Timestamps: those are range-checked)."""
    if tp is Any:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is pytypes.UnionType:
        members = [_exact_types(a) for a in typing.get_args(tp)]
        if any(m is None for m in members):
            return None
        return frozenset().union(*(m for m in members if m is not None))
    if tp is None or tp is type(None):
        return frozenset({type(None)})
    return frozenset({tp}) if tp in _AS_IS else frozenset()


def _spreading(func: Callable[..., Any], struct: type[msgspec.Struct]) -> Callable[..., Any]:
    def call(ctx: Any, *args: Any) -> Any:
        # the Struct's fields in parameter order (the log's, /v1's form), or the Struct itself,
        # which a typed call hands over as its caller made it (`Database.submit_typed`)
        return func(ctx, args[0] if len(args) == 1 and type(args[0]) is struct else struct(*args))

    return call


def _resolve(annotation: Any, globalns: dict[str, Any], localns: dict[str, Any]) -> Any:
    """One parameter's annotation as a type. Only the parameters' are resolved: the context's
    and the return's may name what is imported for type checkers only."""

    def holder() -> None:  # get_type_hints reads a function's __annotations__
        pass

    holder.__annotations__ = {"hint": annotation}
    return typing.get_type_hints(holder, globalns, localns, include_extras=True)["hint"]


def _default_of(f: msgspec.structs.FieldInfo) -> Any:
    if f.required:
        return inspect.Parameter.empty
    return f.default if f.default is not msgspec.NODEFAULT else msgspec.field(default_factory=f.default_factory)


def build_reducer(
    func: Callable[..., Any], kind: ReducerKind, name: str | None = None, localns: dict[str, Any] | None = None, *, spread: bool = False
) -> ReducerDef:
    """`localns` resolves annotations naming the module's row types (tables declared inside a
    function are not in the reducer's globals). With `spread`, the function's one parameter
    after the context is a Struct, and the reducer's parameters are that Struct's fields."""
    rname = name or func.__name__
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    if not params:
        raise SchemaError(f"reducer {rname} must take the context as its first parameter")
    globalns = getattr(func, "__globals__", {})
    out: list[tuple[str, Any, Any]] = []
    for p in params[1:]:  # the context's annotation is never needed, so never evaluated
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise SchemaError(f"reducer {rname}: parameter {p.name} must be positional")
        if p.annotation is inspect.Parameter.empty:
            raise SchemaError(f"reducer {rname}: parameter {p.name} needs a type annotation")
        try:
            hint = _resolve(p.annotation, globalns, localns or {})
        except NameError as e:
            raise SchemaError(f"reducer {rname}: cannot resolve the type of {p.name} ({e})") from None
        out.append((p.name, hint, p.default))
    if kind in LIFECYCLE and out:
        raise SchemaError(f"lifecycle reducer {rname} takes only the context")
    if not spread:
        return ReducerDef(rname, func, kind, out)
    struct = out[0][1] if len(out) == 1 else None
    if not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)):
        raise SchemaError(f"reducer {rname}: spread=True needs one parameter after the context, a msgspec.Struct")
    fields = [(f.name, f.type, _default_of(f)) for f in msgspec.structs.fields(struct)]
    return ReducerDef(rname, func, kind, fields, spread=struct)
