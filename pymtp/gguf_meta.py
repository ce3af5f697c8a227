"""Read a GGUF file's header (metadata and tensor infos) without the native library.

``read_info(path)`` answers "what is this model and will MTP run on it?" in a
few milliseconds, even for a multi-gigabyte file: only the key/value header and
the tensor-info table are parsed; tensor data is never read.

The ``gguf`` package's :class:`GGUFReader` walks every element of every array
field (49k-token vocabularies, merges lists ...) one at a time, which takes
seconds, and refuses tensor types newer than the installed package.
:class:`_HeaderReader` subclasses it: large array payloads are skipped instead
of materialised, and tensors are recorded as :class:`TensorInfo` (name, type,
element count) without touching their data; the rest is the stock reader.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

from pymtp.errors import ModelFileError

# a feature head's fusion of h and trunk features, blk.L.<this> (pymtp graft --features; native/models/dense-mtp.cpp)
FEATURE_TENSOR_SUFFIX = "nextn.eh_proj.feat"

GRAFT_PREFIX = "pymtp.graft."      # provenance keys of a head written by pymtp graft

# Architectures (``general.architecture`` strings, as spelled in llama.cpp's
# LLM_ARCH_NAMES) whose graph in our llama.cpp build can run MTP layers.
MTP_ARCHS = frozenset({
    "glm4moe",
    "deepseek2",
    "deepseek32",
    "deepseek4",
    "glm-dsa",
    "cohere2moe",
    "nemotron_h_moe",
    "bailingmoe3",
    "hy_v3",
    "qwen3next",
    "qwen35",
    "qwen35moe",
    "mimo2",
    "step35",
    # dense archs without native MTP: pymtp's DeepSeek-style MTP block (native/models/dense-mtp.cpp)
    "llama",
    "qwen2",
    "qwen3",
    "gemma3",
})

GGUF_MAGIC_BYTES = b"GGUF"

# Arrays with more elements than this are skipped (header kept, payload not read).
_MAX_ARRAY_ELEMENTS = 256


@dataclass(frozen=True)
class ModelInfo:
    """What the GGUF header says about a model."""

    path: Path
    architecture: str
    name: str | None
    file_size: int                # bytes
    n_params: int                 # sum of element counts over all tensors
    quantization: str             # e.g. "Q4_1", "BF16"; from general.file_type
    n_layer: int | None           # <arch>.block_count (includes MTP blocks where the arch counts them)
    n_mtp_layers: int             # <arch>.nextn_predict_layers, 0 if absent
    mtp_key_present: bool         # whether <arch>.nextn_predict_layers exists at all
    context_length: int | None    # <arch>.context_length (training context)
    chat_template: str | None     # tokenizer.chat_template
    has_mtp_tensors: bool         # any tensor named "*.nextn.*"
    n_tensors: int
    feature_head: bool = False    # a head fed trunk features (pymtp graft --features: *.nextn.eh_proj.feat)
    bos_token: str | None = None  # text of tokenizer.ggml.bos_token_id (for chat templates)
    eos_token: str | None = None  # text of tokenizer.ggml.eos_token_id
    graft_provenance: dict = field(default_factory=dict)   # pymtp.graft.* keys of a grafted head

    @property
    def mtp_key(self) -> str:
        return f"{self.architecture}.nextn_predict_layers"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def _import_reader_base():
    try:
        from gguf import GGUFReader
        from gguf.constants import GGUFValueType
    except ImportError as e:  # pragma: no cover - gguf is a hard dependency
        raise ModelFileError(f"the 'gguf' Python package is required to read model files ({e})") from e
    return GGUFReader, GGUFValueType


class TensorInfo(NamedTuple):
    name: str
    type_name: str     # ggml type, e.g. "Q4_K"; "type N" when the gguf package does not know it
    n_elements: int
    n_bytes: int       # 0 when the type is unknown


def _tensor_type(raw: int, n_elements: int) -> tuple[str, int]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        qtype = GGMLQuantizationType(raw)
    except ValueError:
        return f"type {raw}", 0
    block_size, type_size = GGML_QUANT_SIZES.get(qtype, (0, 0))
    return qtype.name, (n_elements * type_size // block_size if block_size else 0)


@functools.lru_cache(maxsize=1)
def _header_reader_class():
    GGUFReader, GGUFValueType = _import_reader_base()
    import numpy as np

    scalar_sizes = {t: np.dtype(dt).itemsize for t, dt in GGUFReader.gguf_scalar_to_np.items()}

    class _HeaderReader(GGUFReader):
        """GGUFReader that skips the payload of large array fields."""

        def _get_field_parts(self, orig_offs, raw_type):
            if GGUFValueType(raw_type) != GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype = self._get(orig_offs, np.uint32)
            alen = self._get(orig_offs + 4, np.uint64)
            if int(alen[0]) <= _MAX_ARRAY_ELEMENTS:
                return super()._get_field_parts(orig_offs, raw_type)
            itype = GGUFValueType(int(raw_itype[0]))
            payload = self._skip_array_payload(orig_offs + 12, itype, int(alen[0]))
            # Keep only the array header: contents() of a skipped array is [].
            return 12 + payload, [raw_itype, alen], [], [GGUFValueType.ARRAY, itype]

        def _skip_array_payload(self, offs, itype, count):
            if itype in scalar_sizes:
                return scalar_sizes[itype] * count
            if itype != GGUFValueType.STRING:
                raise ValueError(f"unsupported array element type {itype.name}")
            u64 = struct.Struct(self._struct_order() + "Q")
            buf = memoryview(self.data)
            pos = offs
            for _ in range(count):
                (slen,) = u64.unpack_from(buf, pos)
                pos += 8 + slen
            return pos - offs

        def _build_tensors(self, start_offs, fields):
            # Tensor infos only: no views on tensor data, and tensor types newer
            # than the installed gguf package are tolerated (n_bytes unknown -> 0).
            self.tensors = []
            for f in fields:
                _name_len, name_data, _n_dims, dims, raw_dtype, _offset = f.parts
                n_elements = int(np.prod(dims.astype(np.uint64), dtype=np.uint64)) if len(dims) else 1
                type_name, n_bytes = _tensor_type(int(raw_dtype[0]), n_elements)
                self.tensors.append(TensorInfo(bytes(name_data).decode("utf-8", errors="replace"),
                                               type_name, n_elements, n_bytes))

        def string_array_item(self, field, index):
            """Item ``index`` of a skipped string-array field, read straight from the file."""
            (count,) = field.parts[-1].tolist()
            if index >= count:
                return None
            # KV layout: key length u64, key bytes, value type u32, item type u32, count u64, items.
            pos = field.offset + 8 + len(field.name.encode()) + 4 + 4 + 8
            order = self._struct_order()
            u64 = struct.Struct(order + "Q")
            buf = memoryview(self.data)
            for _ in range(index):
                (slen,) = u64.unpack_from(buf, pos)
                pos += 8 + slen
            (slen,) = u64.unpack_from(buf, pos)
            return bytes(buf[pos + 8:pos + 8 + slen]).decode("utf-8", errors="replace")

        def _struct_order(self):
            host_little = sys.byteorder == "little"
            file_little = host_little if self.byte_order == "I" else not host_little
            return "<" if file_little else ">"

    return _HeaderReader


def _field_value(reader, key):
    field = reader.fields.get(key)
    if field is None or not field.types:
        return None
    try:
        return field.contents()
    except (UnicodeDecodeError, IndexError, ValueError):
        return None


def _token_text(reader, token_id_key):
    """Text of the token whose id is stored under ``token_id_key`` (None if unknown)."""
    token_id = _field_value(reader, token_id_key)
    field = reader.fields.get("tokenizer.ggml.tokens")
    if not isinstance(token_id, int) or token_id < 0 or field is None or len(field.types) < 2:
        return None
    if field.data:  # small array: parsed by the stock reader
        return field.contents(token_id) if token_id < len(field.data) else None
    return reader.string_array_item(field, token_id)


def _quantization_name(file_type, tensors) -> str:
    if file_type is not None:
        try:
            from gguf.constants import LlamaFileType
            name = LlamaFileType(int(file_type)).name
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except (ImportError, ValueError):
            return f"file_type {file_type}"
    # No general.file_type: name the tensor type holding the most bytes.
    if not tensors:
        return "unknown"
    by_bytes = Counter()
    for t in tensors:
        by_bytes[t.type_name] += t.n_bytes
    return by_bytes.most_common(1)[0][0]


def check_gguf_path(path, what: str = "model file") -> Path:
    """``path`` (``~`` expanded) if it is an existing file starting with the GGUF magic, else ModelFileError
    naming it as ``what`` ("model file", "MTP head file"). The one GGUF check: the CLI, the server launcher
    and the engine's loader (pymtp.engine.runtime) all call it before llama.cpp sees the file."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelFileError(f"{what} not found: {path}")
    if path.is_dir():
        raise ModelFileError(f"{what} is a directory, not a GGUF file: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelFileError(f"cannot read {what} {path}: {e.strerror or e}") from e
    if magic != GGUF_MAGIC_BYTES:
        raise ModelFileError(f"not a GGUF file: {path}")
    return path


def read_info(path) -> ModelInfo:
    """Parse the GGUF header of ``path``. Raises ModelFileError for missing/non-GGUF/corrupt files."""
    path = check_gguf_path(path)
    reader_cls = _header_reader_class()
    try:
        reader = reader_cls(path, "r")
    except (ValueError, KeyError, IndexError, OverflowError, struct.error) as e:
        raise ModelFileError(f"corrupt or unsupported GGUF file: {path} ({e})") from e

    arch = _field_value(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(f"GGUF file has no general.architecture: {path}")

    def arch_int(suffix):
        v = _field_value(reader, f"{arch}.{suffix}")
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    mtp_layers = arch_int("nextn_predict_layers")
    template = _field_value(reader, "tokenizer.chat_template")
    tensors = reader.tensors
    return ModelInfo(
        path=path,
        architecture=arch,
        name=_field_value(reader, "general.name"),
        file_size=path.stat().st_size,
        n_params=sum(int(t.n_elements) for t in tensors),
        quantization=_quantization_name(_field_value(reader, "general.file_type"), tensors),
        n_layer=arch_int("block_count"),
        n_mtp_layers=mtp_layers or 0,
        mtp_key_present=mtp_layers is not None,
        context_length=arch_int("context_length"),
        chat_template=template if isinstance(template, str) and template else None,
        has_mtp_tensors=any(".nextn." in t.name for t in tensors),
        feature_head=any(t.name.endswith("." + FEATURE_TENSOR_SUFFIX) for t in tensors),
        n_tensors=len(tensors),
        bos_token=_token_text(reader, "tokenizer.ggml.bos_token_id"),
        eos_token=_token_text(reader, "tokenizer.ggml.eos_token_id"),
        graft_provenance={k[len(GRAFT_PREFIX):]: _field_value(reader, k) for k in reader.fields
                          if k.startswith(GRAFT_PREFIX)},
    )


def mtp_support(info: ModelInfo) -> tuple[bool, str]:
    """Whether llama.cpp (our build) will run this model's MTP layers, and why (not)."""
    if info.n_mtp_layers <= 0:
        state = "absent" if not info.mtp_key_present else "= 0"
        return False, (f"model has no MTP layers ({info.mtp_key} {state}); "
                       "train one with `pymtp graft`")
    if info.architecture not in MTP_ARCHS:
        return False, (f"architecture {info.architecture} has no MTP graph "
                       f"(its {info.n_mtp_layers} MTP layer(s) are ignored)")
    if not info.has_mtp_tensors:
        return False, (f"{info.mtp_key} = {info.n_mtp_layers} but the file has no MTP "
                       "(.nextn.) tensors; it was probably converted without them")
    return True, f"{info.n_mtp_layers} MTP layer(s) ({info.mtp_key} = {info.n_mtp_layers})"
