"""classic from Python: libclassic's public C API through ctypes and numpy.

    import classic
    m = classic.Model("ckpt/resnet18-last.safetensors")
    probs, names = m.predict(["cat.jpg", rgb_uint8_hwc_array])
    print(m.top_k("cat.jpg", 3))          # [(name, prob, index), ...]
    feats = m.embed("cat.jpg")            # (embed_dim,) float32
    summary = classic.train("recipe.yaml", epoch_size=2,
                            on_progress=lambda p: print(p["loss"]))
    r = classic.evaluate("ckpt/resnet18-last.safetensors", split="val")
    print(r["top1"], r["confusion"])      # (K, K) int64 array

The library is found through $CLASSIC_LIB (a path to libclassic.so), then
next to this package, in a build/ folder of the source tree, under the
prefix the package is installed in, and last on the loader's path.
Failures raise ClassicError carrying cl_last_error()'s sentence.
"""
import ctypes as _ctypes
import ctypes.util as _ctypes_util
import math as _math
import os as _os

import numpy as _np

__all__ = ["ClassicError", "Model", "evaluate", "train", "version"]

_c_float_p = _ctypes.POINTER(_ctypes.c_float)


class ClassicError(RuntimeError):
    """A libclassic failure: .status is the cl_status, .name its name."""

    def __init__(self, status, name, message):
        super().__init__(message or name)
        self.status = status
        self.name = name


class _Prediction(_ctypes.Structure):
    _fields_ = [("index", _ctypes.c_int), ("prob", _ctypes.c_float),
                ("name", _ctypes.c_char_p)]


class _Progress(_ctypes.Structure):
    _fields_ = [("kind", _ctypes.c_int), ("step", _ctypes.c_longlong),
                ("total_steps", _ctypes.c_longlong),
                ("epoch", _ctypes.c_longlong), ("loss", _ctypes.c_double),
                ("loss_avg", _ctypes.c_double), ("lr", _ctypes.c_double),
                ("img_per_s", _ctypes.c_double), ("last_epoch", _ctypes.c_int),
                ("evaluated", _ctypes.c_int), ("val_top1", _ctypes.c_double),
                ("val_top5", _ctypes.c_double), ("val_loss", _ctypes.c_double),
                ("rank", _ctypes.c_int), ("world_size", _ctypes.c_int)]


class _Summary(_ctypes.Structure):
    _fields_ = [("steps", _ctypes.c_longlong), ("epochs", _ctypes.c_int),
                ("last_loss", _ctypes.c_double), ("val_top1", _ctypes.c_double),
                ("val_top5", _ctypes.c_double), ("val_loss", _ctypes.c_double),
                ("best_top1", _ctypes.c_double), ("seconds", _ctypes.c_double),
                ("img_per_s", _ctypes.c_double), ("stopped", _ctypes.c_int),
                ("last_checkpoint", _ctypes.c_char * 640),
                ("best_checkpoint", _ctypes.c_char * 640),
                ("rank", _ctypes.c_int), ("world_size", _ctypes.c_int),
                ("stop_signal", _ctypes.c_int),
                ("data_wait_share", _ctypes.c_double)]


class _EvalOpts(_ctypes.Structure):
    _fields_ = [("size", _ctypes.c_size_t),
                ("arch", _ctypes.c_char_p), ("backend", _ctypes.c_char_p),
                ("batch", _ctypes.c_int), ("split", _ctypes.c_char_p),
                ("overrides", _ctypes.POINTER(_ctypes.c_char_p)),
                ("n_overrides", _ctypes.c_int), ("keep_features", _ctypes.c_int),
                ("distributed", _ctypes.c_int),
                ("precision", _ctypes.c_char_p),
                ("progress", _ctypes.c_void_p),
                ("progress_ctx", _ctypes.c_void_p)]


class _ClassifierOpts(_ctypes.Structure):
    _fields_ = [("size", _ctypes.c_size_t), ("arch", _ctypes.c_char_p),
                ("backend", _ctypes.c_char_p), ("precision", _ctypes.c_char_p),
                ("raw_weights", _ctypes.c_int)]


class _EvalSummary(_ctypes.Structure):
    _fields_ = [("samples", _ctypes.c_longlong), ("top1", _ctypes.c_double),
                ("top5", _ctypes.c_double), ("loss", _ctypes.c_double),
                ("mean_class_acc", _ctypes.c_double),
                ("num_classes", _ctypes.c_int), ("rank", _ctypes.c_int),
                ("world_size", _ctypes.c_int)]


_PROGRESS_FN = _ctypes.CFUNCTYPE(_ctypes.c_int, _ctypes.c_void_p,
                                _ctypes.POINTER(_Progress))
_U8, _F32 = 0, 1
_INTERRUPTED = -12


def _candidates():
    env = _os.environ.get("CLASSIC_LIB")
    if env:
        yield env
    here = _os.path.dirname(_os.path.abspath(__file__))
    yield _os.path.join(here, "libclassic.so")
    # A source tree: python/classic -> build/ or bd/ beside python/.
    root = _os.path.dirname(_os.path.dirname(here))
    for build in ("build", "bd"):
        yield _os.path.join(root, build, "libclassic.so")
    # An install: PREFIX/lib/python3/dist-packages/classic -> PREFIX/lib.
    d = here
    for _ in range(5):
        d = _os.path.dirname(d)
        yield _os.path.join(d, "lib", "libclassic.so")
    found = _ctypes_util.find_library("classic")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if _os.path.sep in path and not _os.path.exists(path):
            tried.append(path)
            continue
        try:
            return _ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("classic: libclassic.so not found; set CLASSIC_LIB. "
                      "Tried: " + ", ".join(tried))


_lib = _load()


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = argtypes
    return f


_last_error = _fn("cl_last_error", _ctypes.c_char_p)
_status_name = _fn("cl_status_name", _ctypes.c_char_p, _ctypes.c_int)
_version = _fn("cl_version", _ctypes.c_char_p)
_open_fn = _fn("cl_classifier_open", _ctypes.c_int,
               _ctypes.POINTER(_ctypes.c_void_p), _ctypes.c_char_p,
               _ctypes.POINTER(_ClassifierOpts))
_precision = _fn("cl_classifier_precision", _ctypes.c_char_p, _ctypes.c_void_p)
_free = _fn("cl_classifier_free", None, _ctypes.c_void_p)
_num_classes = _fn("cl_classifier_num_classes", _ctypes.c_int, _ctypes.c_void_p)
_class_name = _fn("cl_classifier_class_name", _ctypes.c_char_p,
                  _ctypes.c_void_p, _ctypes.c_int)
_embed_dim = _fn("cl_classifier_embed_dim", _ctypes.c_int, _ctypes.c_void_p)
_classify_file = _fn("cl_classifier_classify_file", _ctypes.c_int,
                     _ctypes.c_void_p, _ctypes.c_char_p, _c_float_p)
_classify_batch = _fn("cl_classifier_classify_batch", _ctypes.c_int,
                      _ctypes.c_void_p, _ctypes.c_int, _ctypes.c_void_p,
                      _ctypes.c_int, _ctypes.c_int, _ctypes.c_int, _ctypes.c_int,
                      _c_float_p)
_classify_files = _fn("cl_classifier_classify_files", _ctypes.c_int,
                      _ctypes.c_void_p, _ctypes.c_int,
                      _ctypes.POINTER(_ctypes.c_char_p), _c_float_p)
_embed_files = _fn("cl_classifier_embed_files", _ctypes.c_int,
                   _ctypes.c_void_p, _ctypes.c_int,
                   _ctypes.POINTER(_ctypes.c_char_p), _c_float_p)
_embed_batch = _fn("cl_classifier_embed_batch", _ctypes.c_int,
                   _ctypes.c_void_p, _ctypes.c_int, _ctypes.c_void_p,
                   _ctypes.c_int, _ctypes.c_int, _ctypes.c_int, _ctypes.c_int,
                   _c_float_p)
_embed_file = _fn("cl_classifier_embed_file", _ctypes.c_int, _ctypes.c_void_p,
                  _ctypes.c_char_p, _c_float_p)
_embed = _fn("cl_classifier_embed", _ctypes.c_int, _ctypes.c_void_p,
             _ctypes.c_void_p, _ctypes.c_int, _ctypes.c_int, _ctypes.c_int,
             _ctypes.c_int, _c_float_p)
_top_k = _fn("cl_classifier_top_k", _ctypes.c_int, _ctypes.c_void_p, _c_float_p,
             _ctypes.c_int, _ctypes.POINTER(_Prediction))
_train = _fn("cl_train", _ctypes.c_int, _ctypes.c_char_p, _ctypes.c_char_p,
             _ctypes.POINTER(_ctypes.c_char_p), _ctypes.c_int, _PROGRESS_FN,
             _ctypes.c_void_p, _ctypes.POINTER(_Summary))
_eval_run = _fn("cl_evaluation_run", _ctypes.c_int,
                _ctypes.POINTER(_ctypes.c_void_p), _ctypes.c_char_p,
                _ctypes.POINTER(_EvalOpts))
_eval_free = _fn("cl_evaluation_free", None, _ctypes.c_void_p)
_eval_summary = _fn("cl_evaluation_summary", _ctypes.c_int, _ctypes.c_void_p,
                    _ctypes.POINTER(_EvalSummary))
_eval_confusion = _fn("cl_evaluation_confusion", _ctypes.c_longlong,
                      _ctypes.c_void_p, _ctypes.c_int, _ctypes.c_int)
_eval_class_name = _fn("cl_evaluation_class_name", _ctypes.c_char_p,
                       _ctypes.c_void_p, _ctypes.c_int)
_eval_features = _fn("cl_evaluation_features", _c_float_p, _ctypes.c_void_p,
                     _ctypes.POINTER(_ctypes.c_longlong),
                     _ctypes.POINTER(_ctypes.c_int))
_eval_labels = _fn("cl_evaluation_labels", _ctypes.POINTER(_ctypes.c_longlong),
                   _ctypes.c_void_p)
_eval_save = _fn("cl_evaluation_save_features", _ctypes.c_int,
                 _ctypes.c_void_p, _ctypes.c_char_p)


def _check(status):
    if status < 0:
        raise ClassicError(status, _status_name(status).decode(),
                           _last_error().decode(errors="replace"))
    return status


def version():
    """libclassic's version string."""
    return _version().decode()


def _enc(s):
    return None if s is None else _os.fsencode(s)


def _pixels(a):
    """An image as (array, type, h, w, c): HWC or HW, uint8 or float."""
    a = _np.asarray(a)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3:
        raise ValueError("an image array must be (H, W) or (H, W, C), not "
                         "shape %s" % (a.shape,))
    if a.shape[2] == 4:  # RGBA: alpha dropped, as for an RGBA PNG file
        a = a[:, :, :3]
    if a.dtype == _np.uint8:
        a, t = _np.ascontiguousarray(a), _U8
    elif _np.issubdtype(a.dtype, _np.floating):
        a, t = _np.ascontiguousarray(a, dtype=_np.float32), _F32
    else:
        raise ValueError("image dtype %s: expected uint8 or a float type "
                         "(0..1)" % a.dtype)
    return a, t, a.shape[0], a.shape[1], a.shape[2]


class Model:
    """A checkpoint opened for inference (any format classic reads).

    precision is "f32", "bf16" or "int8", fixed for the model's life; None
    is the model's own (int8 for a file `classic quantize` wrote, f32
    otherwise).  bf16 is refused with one sentence where the CPU lacks bf16
    dot products, int8 on f32 weights (docs/deploy.md); .precision says
    which runs.
    """

    def __init__(self, path, arch=None, backend=None, precision=None):
        h = _ctypes.c_void_p()
        o = _ClassifierOpts(_ctypes.sizeof(_ClassifierOpts), _enc(arch),
                            _enc(backend), _enc(precision), 0)
        _check(_open_fn(_ctypes.byref(h), _enc(path), _ctypes.byref(o)))
        self._h = h
        self.precision = _precision(h).decode()
        self.num_classes = _num_classes(h)
        self.embed_dim = _embed_dim(h)
        self.classes = [_class_name(h, k).decode()
                        for k in range(self.num_classes)]

    def close(self):
        """Frees the model; later calls raise."""
        if getattr(self, "_h", None):
            _free(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise ClassicError(-4, "CL_ERR_ARG", "the model is closed")
        return self._h

    def _one(self, image, out, by_file, by_pixels):
        h = self._handle()
        ptr = out.ctypes.data_as(_c_float_p)
        if isinstance(image, (str, bytes, _os.PathLike)):
            _check(by_file(h, _os.fsencode(image), ptr))
        else:
            a, t, ih, iw, c = _pixels(image)
            _check(by_pixels(h, a.ctypes.data_as(_ctypes.c_void_p), t, ih, iw,
                             c, ptr))

    def _batched(self, items, out, by_files, by_pixels):
        """Runs several paths, or several arrays of one shape and type, in
        one batch call into out; False when the items are mixed."""
        ptr = out.ctypes.data_as(_c_float_p)
        if len(items) < 2:
            return False
        if all(isinstance(x, (str, bytes, _os.PathLike)) for x in items):
            paths = (_ctypes.c_char_p * len(items))(
                *[_os.fsencode(x) for x in items])
            _check(by_files(self._handle(), len(items), paths, ptr))
            return True
        if not all(isinstance(x, _np.ndarray) for x in items):
            return False
        arrs = [_pixels(x) for x in items]
        if len({(a[1], a[2], a[3], a[4]) for a in arrs}) != 1:
            return False
        _, t, ih, iw, c = arrs[0]
        stack = _np.ascontiguousarray(_np.stack([x[0] for x in arrs]))
        _check(by_pixels(self._handle(), len(items),
                         stack.ctypes.data_as(_ctypes.c_void_p), t, ih, iw, c,
                         ptr))
        return True

    @staticmethod
    def _many(images):
        single = (isinstance(images, (str, bytes, _os.PathLike)) or
                  (isinstance(images, _np.ndarray) and images.ndim in (2, 3)))
        if single:
            return [images], True
        if isinstance(images, _np.ndarray):  # (N, H, W[, C])
            return list(images), False
        return list(images), False

    def probabilities(self, images):
        """Softmax probabilities: (num_classes,) for one image (a path or
        an array), (N, num_classes) for a list or an (N, H, W, C) array.
        Several paths, or several arrays of one shape and type, run as
        batches of the library's batch size."""
        items, single = self._many(images)
        out = _np.empty((len(items), self.num_classes), dtype=_np.float32)
        if not single and self._batched(items, out, _classify_files,
                                        _classify_batch):
            return out
        for i, img in enumerate(items):
            self._one(img, out[i], _classify_file,
                      lambda h, p, t, ih, iw, c, ptr:
                      _classify_batch(h, 1, p, t, ih, iw, c, ptr))
        return out[0] if single else out

    def predict(self, images):
        """(probabilities, names): the probabilities as probabilities()
        gives them and the top class's name of each image (a str for one
        image, a list for several)."""
        probs = self.probabilities(images)
        top = _np.argmax(probs, axis=-1)
        if probs.ndim == 1:
            return probs, self.classes[int(top)]
        return probs, [self.classes[int(k)] for k in top]

    def top_k(self, image, k=5):
        """The k likeliest classes of one image as (name, prob, index)."""
        probs = _np.ascontiguousarray(self.probabilities(image),
                                     dtype=_np.float32)
        if probs.ndim != 1:
            raise ValueError("top_k takes one image")
        out = (_Prediction * max(k, 1))()
        n = _check(_top_k(self._handle(), probs.ctypes.data_as(_c_float_p),
                          k, out))
        return [(out[i].name.decode(), float(out[i].prob), out[i].index)
                for i in range(n)]

    def embed(self, images):
        """Pooled penultimate features: (embed_dim,) or (N, embed_dim).
        Several paths, or several arrays of one shape and type, run as
        batches of the library's batch size."""
        items, single = self._many(images)
        out = _np.empty((len(items), self.embed_dim), dtype=_np.float32)
        if not single and self._batched(items, out, _embed_files,
                                        _embed_batch):
            return out
        for i, img in enumerate(items):
            self._one(img, out[i], _embed_file, _embed)
        return out[0] if single else out


def _progress_dict(p):
    d = {f: getattr(p, f) for f, _ in _Progress._fields_}
    d["kind"] = "epoch" if p.kind == 1 else "step"
    return d


def train(config=None, on_progress=None, **overrides):
    """Trains as a recipe says and returns the run's summary as a dict.

    config is a YAML file's path, YAML text, or None (classic's defaults);
    overrides are config keys (epoch_size=2, data_dir="...").  on_progress
    gets a dict per logged step and per epoch (kind, step, loss, lr,
    img_per_s, val_top1, ...); returning True stops the run cleanly, and
    then the summary's "stopped" is True instead of an exception.
    """
    path = text = None
    if config is not None:
        if isinstance(config, _os.PathLike) or (
                isinstance(config, str) and "\n" not in config and
                _os.path.exists(config)):
            path = _enc(config)
        elif isinstance(config, str) and ("\n" in config or ":" in config):
            text = config.encode()
        else:
            path = _enc(config)
    kv = [("%s=%s" % (k, _yaml_value(v))).encode()
          for k, v in overrides.items()]
    arr = (_ctypes.c_char_p * max(len(kv), 1))(*kv)
    raised = []

    def relay(_ctx, p):
        try:
            return 1 if on_progress(_progress_dict(p.contents)) else 0
        except BaseException as e:  # stop the run, re-raise afterwards
            raised.append(e)
            return 1

    cb = _PROGRESS_FN(relay) if on_progress else _PROGRESS_FN()
    s = _Summary()
    status = _train(path, text, arr, len(kv), cb, None, _ctypes.byref(s))
    if raised:
        raise raised[0]
    if status < 0 and not (status == _INTERRUPTED and s.stopped):
        _check(status)
    out = {f: getattr(s, f) for f, _ in _Summary._fields_}
    out["stopped"] = bool(s.stopped)
    for k in ("last_checkpoint", "best_checkpoint"):
        out[k] = out[k].decode()
    for k in ("val_top1", "val_top5", "val_loss", "best_top1"):
        if _math.isnan(out[k]):
            out[k] = None
    return out


def evaluate(path, split=None, batch=100, arch=None, backend=None,
             features=False, gallery=None, precision=None, **overrides):
    """Evaluates a checkpoint on a dataset split as `classic eval` does.

    split names the split ("test", "val"; None: the recipe's val_split);
    overrides are recipe keys (data_dir="...", limit_val=500).  Returns a
    dict: samples, top1, top5, loss, mean_class_acc (fractions), classes
    (names) and confusion ((K, K) int64, row = true class).  features=True
    adds "features" ((N, D) float32, the split's order) and "labels" (N);
    gallery="g.safetensors" also saves them as `classic retrieve`'s gallery.
    precision is "f32", "bf16" or "int8" (None: the model's own), as
    Model's.
    """
    kv = [("%s=%s" % (k, _yaml_value(v))).encode()
          for k, v in overrides.items()]
    arr = (_ctypes.c_char_p * max(len(kv), 1))(*kv)
    keep = bool(features or gallery)
    o = _EvalOpts(_ctypes.sizeof(_EvalOpts), _enc(arch), _enc(backend), batch,
                  _enc(split), arr, len(kv), 1 if keep else 0, 0,
                  _enc(precision), None, None)
    h = _ctypes.c_void_p()
    _check(_eval_run(_ctypes.byref(h), _enc(path), _ctypes.byref(o)))
    try:
        s = _EvalSummary()
        _check(_eval_summary(h, _ctypes.byref(s)))
        k = s.num_classes
        out = {f: getattr(s, f) for f in ("samples", "top1", "top5", "loss",
                                          "mean_class_acc")}
        out["classes"] = [_eval_class_name(h, i).decode() for i in range(k)]
        out["confusion"] = _np.array(
            [[_eval_confusion(h, t, p) for p in range(k)] for t in range(k)],
            dtype=_np.int64)
        if keep:
            n, dim = _ctypes.c_longlong(), _ctypes.c_int()
            f = _eval_features(h, _ctypes.byref(n), _ctypes.byref(dim))
            out["features"] = _np.ctypeslib.as_array(
                f, shape=(n.value, dim.value)).copy()
            out["labels"] = _np.ctypeslib.as_array(
                _eval_labels(h), shape=(n.value,)).astype(_np.int64)
            if gallery is not None:
                _check(_eval_save(h, _enc(gallery)))
        return out
    finally:
        _eval_free(h)


def _yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)
