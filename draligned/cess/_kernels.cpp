// Compiled kernels of the columns path, each with a numpy or DuckDB twin that gives the same result without it:
//
// write_lines, the writer of draligned.cess.json_lines: the `cess estimate --json` lines of a run of estimates,
// byte for byte what orjson.dumps writes for each row dict of column_estimators.estimate_rows (and pydantic's
// model_dump_json for a TrajectoryEstimate), so the DuckDB path and this one are interchangeable.
//
// orjson's forms, which this follows: keys in the row's order, no spaces; a float as its shortest round-trip
// digits (std::to_chars, as Ryu gives them) laid out as the Rust ryu crate lays them out (fixed notation for a
// decimal exponent in [-5, 16), "1.0" for an integer value, else "1.5e-7", "1e16"); NaN and infinities as null;
// strings with '"', '\\' and the controls below 0x20 escaped (\b \t \n \f \r, else \u00xx in lower case),
// everything else as its UTF-8 bytes.
// The strings are read with the GIL held (their UTF-8 stays owned by the lists); the text is written without it.
//
// round_min_sum, for draligned.cess.parquet_batch: each round's smallest probability and their sum, in one pass
// over the probabilities without the GIL (numpy's two reduceat passes were a third of the Parquet checks).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

constexpr int N_NUMBERS = 10;  // opened_mean .. theta_star, as json_lines.NUMBERS
constexpr int N_POINTS_FROM = 2, N_POINTS_TO = 7;  // ipw_raw .. cess_opened_anchor: null where hidden
constexpr std::string_view KEYS[N_NUMBERS] = {
    ",\"opened_mean\":", ",\"outcome_regression\":", ",\"ipw_raw\":", ",\"dr_raw\":", ",\"cess\":",
    ",\"cess_clip_then_shrink\":", ",\"cess_opened_anchor\":", ",\"ess\":", ",\"max_weight\":",
    ",\"theta_star\":"};
constexpr size_t MAX_FLOAT = 25, MAX_INT = 20, FIXED = 260;  // bytes: a float, an int64, the keys and brackets

char *put(char *out, std::string_view text) {
  std::memcpy(out, text.data(), text.size());
  return out + text.size();
}

// A finite double as the ryu crate's format64 writes it (orjson's floats).
char *put_float(char *out, double value) {
  if (value == 0.0) return put(out, std::signbit(value) ? "-0.0" : "0.0");
  char sci[32];
  auto written = std::to_chars(sci, sci + sizeof sci, value, std::chars_format::scientific);
  const char *s = sci, *end = written.ptr;
  if (*s == '-') *out++ = *s++;
  char digits[20];
  int length = 0;
  for (; s < end && *s != 'e'; s++)
    if (*s != '.') digits[length++] = *s;
  int exponent = 0;
  std::from_chars(s + 1 + (s[1] == '+'), end, exponent);
  int kk = exponent + 1;  // the value is 0.digits × 10^kk
  if (length <= kk && kk <= 16) {  // 1234e7 -> 12340000000.0
    out = put(out, {digits, size_t(length)});
    std::memset(out, '0', size_t(kk - length));
    out += kk - length;
    return put(out, ".0");
  }
  if (0 < kk && kk <= 16) {  // 1234e-2 -> 12.34
    out = put(out, {digits, size_t(kk)});
    *out++ = '.';
    return put(out, {digits + kk, size_t(length - kk)});
  }
  if (-5 < kk && kk <= 0) {  // 1234e-6 -> 0.001234
    out = put(out, "0.");
    std::memset(out, '0', size_t(-kk));
    out += -kk;
    return put(out, {digits, size_t(length)});
  }
  *out++ = digits[0];  // 1e30, 1234e30 -> 1.234e33
  if (length > 1) {
    *out++ = '.';
    out = put(out, {digits + 1, size_t(length - 1)});
  }
  *out++ = 'e';
  if (kk > 1) *out++ = '+';  // pydantic's 1e+16 (and orjson's from 3.11.7 on), not ryu's 1e16
  return std::to_chars(out, out + MAX_INT, kk - 1).ptr;
}

char *put_number(char *out, double value) {
  return std::isfinite(value) ? put_float(out, value) : put(out, "null");
}

char *put_string(char *out, std::string_view text) {
  static const char hex[] = "0123456789abcdef";
  *out++ = '"';
  for (unsigned char c : text) {
    if (c >= 0x20 && c != '"' && c != '\\') {
      *out++ = char(c);
      continue;
    }
    *out++ = '\\';
    switch (c) {
      case '"': *out++ = '"'; break;
      case '\\': *out++ = '\\'; break;
      case '\b': *out++ = 'b'; break;
      case '\t': *out++ = 't'; break;
      case '\n': *out++ = 'n'; break;
      case '\f': *out++ = 'f'; break;
      case '\r': *out++ = 'r'; break;
      default: out = put(out, "u00"), *out++ = hex[c >> 4], *out++ = hex[c & 15];
    }
  }
  *out++ = '"';
  return out;
}

struct Buffer {  // a read-only C-contiguous 1-d buffer of n items of one size
  Py_buffer view{};
  bool held = false;
  ~Buffer() {
    if (held) PyBuffer_Release(&view);
  }
  // kinds: the struct codes accepted ("d" float64, "lq" int64, "?" bool), each of itemsize bytes
  bool take(PyObject *object, const char *kinds, Py_ssize_t itemsize, Py_ssize_t n, const char *what) {
    if (PyObject_GetBuffer(object, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return false;
    held = true;
    const char *code = view.format ? view.format : "B";
    if (*code == '@' || *code == '=' || *code == '<') code++;  // native (or little-endian) order
    if (code[0] == '\0' || code[1] != '\0' || !std::strchr(kinds, code[0]) || view.itemsize != itemsize ||
        view.len != itemsize * n) {
      PyErr_Format(PyExc_ValueError, "%s: expected %zd items of type '%s' (%zd bytes), got format '%s'", what, n,
                   kinds, itemsize, view.format ? view.format : "B");
      return false;
    }
    return true;
  }
  template <typename T>
  const T *data() const {
    return static_cast<const T *>(view.buf);
  }
};

bool utf8(PyObject *list, Py_ssize_t i, std::vector<std::string_view> &out, size_t &bound) {
  Py_ssize_t size;
  const char *text = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(list, i), &size);
  if (text == nullptr) return false;
  out.emplace_back(text, size_t(size));
  bound += 6 * size_t(size) + 2;
  return true;
}

PyObject *write_lines(PyObject *, PyObject *args) {
  PyObject *ids, *tasks, *rounds_obj, *numbers_obj, *hidden_obj, *lower_obj, *upper_obj;
  if (!PyArg_ParseTuple(args, "O!O!OO!OOO", &PyList_Type, &ids, &PyList_Type, &tasks, &rounds_obj, &PyTuple_Type,
                        &numbers_obj, &hidden_obj, &lower_obj, &upper_obj))
    return nullptr;
  Py_ssize_t n = PyList_GET_SIZE(ids);
  if (PyList_GET_SIZE(tasks) != n || PyTuple_GET_SIZE(numbers_obj) != N_NUMBERS) {
    PyErr_SetString(PyExc_ValueError, "ids and tasks must be as long, and numbers hold 10 arrays");
    return nullptr;
  }
  Buffer rounds, hidden, lower, upper, numbers[N_NUMBERS];
  if (!rounds.take(rounds_obj, "lq", 8, n, "rounds") || !hidden.take(hidden_obj, "?", 1, n, "hidden") ||
      !lower.take(lower_obj, "d", 8, n, "lower") || !upper.take(upper_obj, "d", 8, n, "upper"))
    return nullptr;
  for (int k = 0; k < N_NUMBERS; k++)
    if (!numbers[k].take(PyTuple_GET_ITEM(numbers_obj, k), "d", 8, n, "numbers")) return nullptr;
  std::vector<std::string_view> id_text, task_text;
  id_text.reserve(size_t(n)), task_text.reserve(size_t(n));
  size_t bound = size_t(n) * (FIXED + MAX_INT + (N_NUMBERS + 2) * MAX_FLOAT);
  for (Py_ssize_t i = 0; i < n; i++)
    if (!utf8(ids, i, id_text, bound) || !utf8(tasks, i, task_text, bound)) return nullptr;
  PyObject *result = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(bound));
  if (result == nullptr) return nullptr;
  char *const start = PyBytes_AS_STRING(result);
  char *out = start;
  Py_BEGIN_ALLOW_THREADS
  const double *values[N_NUMBERS];
  for (int k = 0; k < N_NUMBERS; k++) values[k] = numbers[k].data<double>();
  const bool *hide = hidden.data<bool>();
  for (Py_ssize_t i = 0; i < n; i++) {
    out = put(out, "{\"trajectory_id\":");
    out = put_string(out, id_text[size_t(i)]);
    out = put(out, ",\"task_id\":");
    out = put_string(out, task_text[size_t(i)]);
    out = put(out, ",\"rounds\":");
    out = std::to_chars(out, out + MAX_INT, rounds.data<int64_t>()[i]).ptr;
    for (int k = 0; k < N_NUMBERS; k++) {
      out = put(out, KEYS[k]);
      out = hide[i] && k >= N_POINTS_FROM && k < N_POINTS_TO ? put(out, "null") : put_number(out, values[k][i]);
    }
    out = put(out, ",\"support_interval\":");
    if (hide[i]) {
      *out++ = '[';
      out = put_number(out, lower.data<double>()[i]);
      *out++ = ',';
      out = put_number(out, upper.data<double>()[i]);
      *out++ = ']';
    } else {
      out = put(out, "null");
    }
    out = put(out, "}\n");
  }
  Py_END_ALLOW_THREADS
  if (_PyBytes_Resize(&result, out - start) != 0) return nullptr;
  return result;
}

// numpy's pairwise summation (loops_utils.h: DOUBLE_pairwise_sum), in its order, so that a round's sum is
// bit for bit np.add.reduceat's: the first value, plus this sum of the rest.
double pairwise_sum(const double *a, int64_t n) {
  if (n < 8) {
    double res = -0.0;
    for (int64_t i = 0; i < n; i++) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; j++) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; j++) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i];
    return res;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

// round_min_sum(values, offsets, low, total): for each segment offsets[r]:offsets[r + 1] of values, its
// minimum (NaN if any value is NaN, or the segment is empty) and its sum as np.add.reduceat sums it (NaN for an
// empty one), into low, total. Eight running minima and numpy's eight partial sums: no chain of dependent adds.
PyObject *round_min_sum(PyObject *, PyObject *args) {
  PyObject *values_obj, *offsets_obj, *low_obj, *total_obj;
  if (!PyArg_ParseTuple(args, "OOOO", &values_obj, &offsets_obj, &low_obj, &total_obj)) return nullptr;
  Py_buffer values{}, offsets{}, low{}, total{};
  bool ok = PyObject_GetBuffer(values_obj, &values, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0;
  ok = ok && PyObject_GetBuffer(offsets_obj, &offsets, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0;
  ok = ok && PyObject_GetBuffer(low_obj, &low, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) == 0;
  ok = ok && PyObject_GetBuffer(total_obj, &total, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) == 0;
  Py_ssize_t rounds = offsets.len / 8 - 1, n_values = values.len / 8;
  if (ok && (values.itemsize != 8 || offsets.itemsize != 8 || low.itemsize != 8 || total.itemsize != 8 ||
             rounds < 0 || low.len != rounds * 8 || total.len != rounds * 8)) {
    PyErr_SetString(PyExc_ValueError, "round_min_sum: float64 values, int64 offsets (R + 1), float64 low and total (R)");
    ok = false;
  }
  const int64_t *off = static_cast<const int64_t *>(offsets.buf);
  for (Py_ssize_t r = 0; ok && r < rounds; r++)
    if (off[r] < 0 || off[r] > off[r + 1] || off[r + 1] > n_values) {
      PyErr_SetString(PyExc_ValueError, "round_min_sum: offsets outside the values");
      ok = false;
    }
  if (ok) {
    const double *v = static_cast<const double *>(values.buf);
    double *lo = static_cast<double *>(low.buf), *sum = static_cast<double *>(total.buf);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rounds; r++) {
      double smallest = NAN, s = NAN;
      if (off[r] < off[r + 1]) {
        const double *first = v + off[r];
        int64_t n = off[r + 1] - off[r];
        double m[8];
        bool nan = false;
        for (int j = 0; j < 8; j++) m[j] = first[0];
        for (int64_t i = 0; i + 8 <= n; i += 8)
          for (int j = 0; j < 8; j++) {
            nan |= first[i + j] != first[i + j];
            m[j] = first[i + j] < m[j] ? first[i + j] : m[j];
          }
        for (int64_t i = n - n % 8; i < n; i++) {
          nan |= first[i] != first[i];
          m[0] = first[i] < m[0] ? first[i] : m[0];
        }
        smallest = nan ? NAN : std::min({m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]});
        s = first[0] + pairwise_sum(first + 1, n - 1);
      }
      lo[r] = smallest, sum[r] = s;
    }
    Py_END_ALLOW_THREADS
  }
  for (Py_buffer *view : {&values, &offsets, &low, &total})
    if (view->obj != nullptr) PyBuffer_Release(view);
  if (!ok) return nullptr;
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"write_lines", write_lines, METH_VARARGS,
     "write_lines(ids, tasks, rounds, numbers, hidden, lower, upper) -> bytes: the JSON lines of n estimates "
     "(ids, tasks: lists of str; rounds: int64; numbers: a tuple of the 10 float64 arrays of json_lines.NUMBERS; "
     "hidden: bool, the support interval applies; lower, upper: float64)."},
    {"round_min_sum", round_min_sum, METH_VARARGS,
     "round_min_sum(values, offsets, low, total) -> None: each segment's minimum (NaN if it holds a NaN or is "
     "empty) and sum (NaN if empty) of float64 values at int64 offsets, into the float64 arrays low and total."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "Compiled kernels of the columns path (json_lines, parquet_batch).",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kernels() { return PyModule_Create(&module); }
