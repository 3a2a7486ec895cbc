// Compiled kernels of the columns path, each but plain_spans with a numpy or DuckDB twin that gives the same result
// without it:
//
// write_lines, the writer of draligned.cess.json_lines: the `cess estimate --json` lines of a run of estimates,
// byte for byte what orjson.dumps writes for each row dict of column_estimators.estimate_rows (and pydantic's
// model_dump_json for a TrajectoryEstimate), so the DuckDB path and this one are interchangeable.
//
// orjson's forms, which this follows: keys in the row's order, no spaces; a float as its shortest round-trip
// digits (Dragonbox's, the digits Ryu gives) laid out as the Rust ryu crate lays them out (fixed notation for a
// decimal exponent in [-5, 16), "1.0" for an integer value, else "1.5e-7", "1e16"); NaN and infinities as null;
// strings with '"', '\\' and the controls below 0x20 escaped (\b \t \n \f \r, else \u00xx in lower case),
// everything else as its UTF-8 bytes.
// The strings are read with the GIL held (their UTF-8 stays owned by the lists); the text is written without it.
//
// round_min_sum, for draligned.cess.parquet_batch: each round's smallest probability and their sum, in one pass
// over the probabilities without the GIL (numpy's two reduceat passes were a third of the Parquet checks).
//
// check_flat, for draligned.cess.parquet_flat: every numeric rule of parquet_batch.check_batch over a flat-2 batch
// (per row whether it is suspect) and the columns it gathers, in one pass over the rows without the GIL (numpy's
// were about 30 passes over the batch); the rows it flags go to the full validator as before.
//
// plain_spans, for draligned.cess.parquet_flat: where each row's probabilities lie in a flat-2 column chunk of
// uncompressed PLAIN pages, read from its page headers (no twin: any other chunk is decoded by pyarrow).
//
// plain_doubles, for draligned.cess.parquet_flat: the float lists of a flat row group (offsets, values, validity,
// NULL lists) decoded from uncompressed PLAIN pages, levels included (no twin: any other chunk is decoded by pyarrow,
// whose decode of the levels took about twice as long).
//
// id_hashes, for draligned.cess.id_repeats: a 64-bit hash of each id's UTF-8 (the strings read with the GIL held,
// hashed without it), so that repeated trajectory ids are found by sorting numbers instead of in a set of str under
// the GIL (no twin needed for the result: Python's hash() stands in without the extension, and a repeated hash is
// only a reason to look at the ids themselves).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>
#include <vector>

#include "dragonbox.h"  // third_party/dragonbox: Junekey Jeon's Dragonbox (Boost Software License 1.0)

namespace {

constexpr int N_NUMBERS = 10;  // opened_mean .. theta_star, as json_lines.NUMBERS
constexpr int N_POINTS_FROM = 2, N_POINTS_TO = 7;  // ipw_raw .. cess_opened_anchor: null where hidden
constexpr std::string_view KEYS[N_NUMBERS] = {
    ",\"opened_mean\":", ",\"outcome_regression\":", ",\"ipw_raw\":", ",\"dr_raw\":", ",\"cess\":",
    ",\"cess_clip_then_shrink\":", ",\"cess_opened_anchor\":", ",\"ess\":", ",\"max_weight\":",
    ",\"theta_star\":"};
constexpr size_t MAX_FLOAT = 25, MAX_INT = 20, FIXED = 260;  // bytes: a float, an int64, the keys and brackets
constexpr size_t OVERRUN = 24;  // bytes put_float may write past its text

char *put(char *out, std::string_view text) {
  std::memcpy(out, text.data(), text.size());
  return out + text.size();
}

constexpr char PAIRS[201] =  // "00" .. "99"
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

// The decimal digits of v (v < 10^20) at out, from its first nonzero one (one "0" for 0), and their number.
// Twenty digits are made, zero-padded, in blocks of two, then the leading zeros skipped: half of to_chars' time
// for a double's 15 to 17 digits (20 bytes are written at out).
int put_digits(char *out, uint64_t v) {
  static constexpr uint64_t POWERS[20] = {
      1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull, 100000000ull, 1000000000ull,
      10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull, 100000000000000ull,
      1000000000000000ull, 10000000000000000ull, 100000000000000000ull, 1000000000000000000ull,
      10000000000000000000ull};
  char padded[40] = {};
  const uint64_t blocks[3] = {v / 10000000000000000ull, v / 100000000ull % 100000000ull, v % 100000000ull};
  std::memcpy(padded, PAIRS + 2 * (blocks[0] / 100), 2);  // the top block is below 1845
  std::memcpy(padded + 2, PAIRS + 2 * (blocks[0] % 100), 2);
  for (int b = 1; b < 3; b++) {
    const auto eight = uint32_t(blocks[b]), high = eight / 10000, low = eight % 10000;
    char *at = padded + 4 + 8 * (b - 1);
    std::memcpy(at, PAIRS + 2 * (high / 100), 2);
    std::memcpy(at + 2, PAIRS + 2 * (high % 100), 2);
    std::memcpy(at + 4, PAIRS + 2 * (low / 100), 2);
    std::memcpy(at + 6, PAIRS + 2 * (low % 100), 2);
  }
  const int guess = ((64 - __builtin_clzll(v | 1)) * 1233) >> 12;  // floor(log10(2^bits)): the count or one less
  const int count = guess + ((v | 1) >= POWERS[guess]);
  std::memcpy(out, padded + 20 - count, 20);
  return count;
}

// A finite double as the ryu crate's format64 writes it (orjson's floats): Dragonbox's shortest round-trip
// digits (the digits of Ryu and std::to_chars, in a quarter of to_chars' time), laid out with copies of fixed
// size (up to OVERRUN bytes past the text written: the caller's buffer has them to spare).
char *put_float(char *out, double value) {
  if (value == 0.0) return put(out, std::signbit(value) ? "-0.0" : "0.0");
  const auto decimal = jkj::dragonbox::to_decimal(value);  // significand × 10^exponent, no trailing zeros
  if (decimal.is_negative) *out++ = '-';
  char digits[40];  // at most 17 digits; the rest is read by the fixed-size copies only
  const int length = put_digits(digits, decimal.significand);
  const int kk = decimal.exponent + length;  // the value is 0.digits × 10^kk
  if (length <= kk && kk <= 16) {  // 1234e7 -> 12340000000.0
    std::memcpy(out, digits, 20);
    out += length;
    std::memset(out, '0', 16);
    out += kk - length;
    return put(out, ".0");
  }
  if (0 < kk && kk <= 16) {  // 1234e-2 -> 12.34
    std::memcpy(out, digits, 16);
    out += kk;
    *out++ = '.';
    std::memcpy(out, digits + kk, 20);
    return out + (length - kk);
  }
  if (-5 < kk && kk <= 0) {  // 1234e-6 -> 0.001234
    std::memcpy(out, "0.00000", 8);
    out += 2 - kk;
    std::memcpy(out, digits, 20);
    return out + length;
  }
  out[0] = digits[0];  // 1e30, 1234e30 -> 1.234e33
  out[1] = '.';
  std::memcpy(out + 2, digits + 1, 20);
  out += length > 1 ? length + 1 : 1;
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
  // kinds: the struct codes accepted ("d" float64, "lq" int64, "i" int32, "?" bool, "B" bytes), each of itemsize
  // bytes; n items (any number if n < 0); writable: an output
  bool take(PyObject *object, const char *kinds, Py_ssize_t itemsize, Py_ssize_t n, const char *what,
            bool writable = false) {
    if (PyObject_GetBuffer(object, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) != 0)
      return false;
    held = true;
    const char *code = view.format ? view.format : "B";
    if (*code == '@' || *code == '=' || *code == '<') code++;  // native (or little-endian) order
    if (code[0] == '\0' || code[1] != '\0' || !std::strchr(kinds, code[0]) || view.itemsize != itemsize ||
        (n >= 0 && view.len != itemsize * n)) {
      if (n >= 0)
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of type '%s' (%zd bytes), got %zd of format '%s'", what,
                     n, kinds, itemsize, view.len / std::max<Py_ssize_t>(view.itemsize, 1), view.format ? view.format : "B");
      else
        PyErr_Format(PyExc_ValueError, "%s: expected items of type '%s' (%zd bytes), got format '%s'", what, kinds,
                     itemsize, view.format ? view.format : "B");
      return false;
    }
    return true;
  }
  Py_ssize_t size() const { return view.len / view.itemsize; }
  template <typename T>
  const T *data() const {
    return static_cast<const T *>(view.buf);
  }
  template <typename T>
  T *out() const {
    return static_cast<T *>(view.buf);
  }
};

// The estimates of n rows, as write_lines and the table's kernels take them: ids and tasks (lists of str, their
// UTF-8 read with the GIL held and owned by the lists), rounds (int64), the N_NUMBERS float64 arrays of
// json_lines.NUMBERS, hidden (bool: the support interval applies, the point estimates are not given) and the
// interval's bounds (float64).
struct Rows {
  Py_ssize_t n = 0;
  Buffer rounds, hidden, lower, upper, numbers[N_NUMBERS];
  std::vector<std::string_view> ids, tasks;
  size_t text = 0;  // the ids' and tasks' UTF-8 bytes

  bool take(PyObject *ids_obj, PyObject *tasks_obj, PyObject *rounds_obj, PyObject *numbers_obj, PyObject *hidden_obj,
            PyObject *lower_obj, PyObject *upper_obj) {
    if (!PyList_Check(ids_obj) || !PyList_Check(tasks_obj) || !PyTuple_Check(numbers_obj)) {
      PyErr_SetString(PyExc_TypeError, "ids and tasks must be lists, numbers a tuple");
      return false;
    }
    n = PyList_GET_SIZE(ids_obj);
    if (PyList_GET_SIZE(tasks_obj) != n || PyTuple_GET_SIZE(numbers_obj) != N_NUMBERS) {
      PyErr_SetString(PyExc_ValueError, "ids and tasks must be as long, and numbers hold 10 arrays");
      return false;
    }
    if (!rounds.take(rounds_obj, "lq", 8, n, "rounds") || !hidden.take(hidden_obj, "?", 1, n, "hidden") ||
        !lower.take(lower_obj, "d", 8, n, "lower") || !upper.take(upper_obj, "d", 8, n, "upper"))
      return false;
    for (int k = 0; k < N_NUMBERS; k++)
      if (!numbers[k].take(PyTuple_GET_ITEM(numbers_obj, k), "d", 8, n, "numbers")) return false;
    ids.reserve(size_t(n)), tasks.reserve(size_t(n));
    for (Py_ssize_t i = 0; i < n; i++)
      if (!utf8(ids_obj, i, ids) || !utf8(tasks_obj, i, tasks)) return false;
    return true;
  }
  double number(int k, Py_ssize_t i) const { return numbers[k].data<double>()[i]; }
  bool hides(Py_ssize_t i) const { return hidden.data<bool>()[i]; }

 private:
  bool utf8(PyObject *list, Py_ssize_t i, std::vector<std::string_view> &out) {
    Py_ssize_t size;
    const char *chars = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(list, i), &size);
    if (chars == nullptr) return false;
    out.emplace_back(chars, size_t(size));
    text += size_t(size);
    return true;
  }
};

PyObject *write_lines(PyObject *, PyObject *args) {
  PyObject *ids, *tasks, *rounds_obj, *numbers_obj, *hidden_obj, *lower_obj, *upper_obj;
  Rows rows;
  if (!PyArg_ParseTuple(args, "OOOOOOO", &ids, &tasks, &rounds_obj, &numbers_obj, &hidden_obj, &lower_obj,
                        &upper_obj) ||
      !rows.take(ids, tasks, rounds_obj, numbers_obj, hidden_obj, lower_obj, upper_obj))
    return nullptr;
  const Py_ssize_t n = rows.n;  // a string's escapes take at most 6 bytes per byte, and its quotes 2
  const size_t bound = size_t(n) * (FIXED + MAX_INT + (N_NUMBERS + 2) * MAX_FLOAT + 4) + 6 * rows.text;
  PyObject *result = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(bound + OVERRUN));
  if (result == nullptr) return nullptr;
  char *const start = PyBytes_AS_STRING(result);
  char *out = start;
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < n; i++) {
    const bool hide = rows.hides(i);
    out = put(out, "{\"trajectory_id\":");
    out = put_string(out, rows.ids[size_t(i)]);
    out = put(out, ",\"task_id\":");
    out = put_string(out, rows.tasks[size_t(i)]);
    out = put(out, ",\"rounds\":");
    out = std::to_chars(out, out + MAX_INT, rows.rounds.data<int64_t>()[i]).ptr;
    for (int k = 0; k < N_NUMBERS; k++) {
      out = put(out, KEYS[k]);
      out = hide && k >= N_POINTS_FROM && k < N_POINTS_TO ? put(out, "null") : put_number(out, rows.number(k, i));
    }
    out = put(out, ",\"support_interval\":");
    if (hide) {
      *out++ = '[';
      out = put_number(out, rows.lower.data<double>()[i]);
      *out++ = ',';
      out = put_number(out, rows.upper.data<double>()[i]);
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

// The rows of the `cess estimate` table, as the CLI's _table writes them over column_estimators.estimate_rows:
// per row the id, the task, the rounds, the ten numbers (Python's f"{v:.4f}"; "-" for a point estimate where
// the support interval applies, and for an unknown theta*) and the interval ("[lo, hi]", or "-"), each
// right-aligned to its column's width in characters (code points, as str.rjust counts them), two spaces apart.
constexpr int N_CELLS = 14;
constexpr int THETA = 9;           // theta_star among the numbers: "-" when NaN (unknown Y)
constexpr size_t MAX_FIXED = 330;  // f"{v:.4f}" of a double: at most 309 integer digits, a sign, "." and 4

char *put_fixed(char *out, double v) {  // Python's f"{v:.4f}": correctly rounded, "-0.0000", "nan", "inf"
  if (std::isnan(v)) return put(out, "nan");
  if (std::isinf(v)) return put(out, v < 0 ? "-inf" : "inf");
  return std::to_chars(out, out + MAX_FIXED, v, std::chars_format::fixed, 4).ptr;
}

size_t code_points(std::string_view text) {
  size_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

// Cell c of row i: a string of the rows (ids, tasks), or the text made in scratch (2 * MAX_FIXED + 4 bytes).
std::string_view table_cell(const Rows &rows, int c, Py_ssize_t i, char *scratch) {
  if (c == 0) return rows.ids[size_t(i)];
  if (c == 1) return rows.tasks[size_t(i)];
  char *end = scratch;
  if (c == 2) {
    end = std::to_chars(scratch, scratch + MAX_INT, rows.rounds.data<int64_t>()[i]).ptr;
  } else if (c < 3 + N_NUMBERS) {
    const int k = c - 3;
    const double v = rows.number(k, i);
    const bool absent = (rows.hides(i) && k >= N_POINTS_FROM && k < N_POINTS_TO) || (k == THETA && std::isnan(v));
    end = absent ? put(scratch, "-") : put_fixed(scratch, v);
  } else if (rows.hides(i)) {
    *end++ = '[';
    end = put_fixed(end, rows.lower.data<double>()[i]);
    end = put(end, ", ");
    end = put_fixed(end, rows.upper.data<double>()[i]);
    *end++ = ']';
  } else {
    end = put(scratch, "-");
  }
  return {scratch, size_t(end - scratch)};
}

// The arguments of table_widths and write_table: the rows (as write_lines takes them), then the N_CELLS int64
// column widths (written to by table_widths).
bool take_table(PyObject *args, Rows &rows, Buffer &widths, bool writable) {
  PyObject *in[7], *widths_obj;
  return PyArg_ParseTuple(args, "OOOOOOOO", &in[0], &in[1], &in[2], &in[3], &in[4], &in[5], &in[6], &widths_obj) &&
         rows.take(in[0], in[1], in[2], in[3], in[4], in[5], in[6]) &&
         widths.take(widths_obj, "lq", 8, N_CELLS, "widths", writable);
}

// table_widths(ids, tasks, rounds, numbers, hidden, lower, upper, widths): widths (N_CELLS int64) raised to
// the widest cell of each column among the rows.
// A number column's widest cell follows from two of its values: f"{v:.4f}" grows with |v| among values of one
// sign, and a negative one (sign bit set, -0.0 too) takes a "-" more, so only the largest magnitude of each
// sign is formatted; "nan", "inf", "-inf" and "-" (never wider than a finite value's 6 characters) are counted
// apart. The interval's two bounds vary together, so its cells (the rows whose interval applies) are each made.
struct Widest {
  double positive = -1, negative = -1;  // the largest |v| of each sign among the finite values (-1: none)
  int64_t other = 0;                    // the widest cell that is not a finite value
  void add(double v, bool absent) {
    if (absent) other = std::max<int64_t>(other, 1);
    else if (!std::isfinite(v)) other = std::max<int64_t>(other, std::isnan(v) || v > 0 ? 3 : 4);
    else if (std::signbit(v)) negative = std::max(negative, -v);
    else positive = std::max(positive, v);
  }
  int64_t width() const {
    char text[MAX_FIXED];
    int64_t widest = other;
    if (positive >= 0) widest = std::max<int64_t>(widest, put_fixed(text, positive) - text);
    if (negative >= 0) widest = std::max<int64_t>(widest, put_fixed(text, -negative) - text);
    return widest;
  }
};

PyObject *table_widths(PyObject *, PyObject *args) {
  Rows rows;
  Buffer widths;
  if (!take_table(args, rows, widths, true)) return nullptr;
  int64_t *const width = widths.out<int64_t>();
  Py_BEGIN_ALLOW_THREADS
  char scratch[2 * MAX_FIXED + 4];
  Widest numbers[N_NUMBERS];
  for (Py_ssize_t i = 0; i < rows.n; i++) {
    for (int c : {0, 1, 2, N_CELLS - 1})  // the strings, the rounds, the interval ("-" where none): each cell made
      width[c] = std::max(width[c], c == N_CELLS - 1 && !rows.hides(i)
                                        ? int64_t(1) : int64_t(code_points(table_cell(rows, c, i, scratch))));
    for (int k = 0; k < N_NUMBERS; k++) {
      const double v = rows.number(k, i);
      numbers[k].add(v, (rows.hides(i) && k >= N_POINTS_FROM && k < N_POINTS_TO) || (k == THETA && std::isnan(v)));
    }
  }
  for (int k = 0; k < N_NUMBERS; k++) width[3 + k] = std::max(width[3 + k], numbers[k].width());
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// write_table(ids, tasks, rounds, numbers, hidden, lower, upper, widths) -> bytes: the rows' lines, each cell
// right-aligned to its column's width, each line ending in "\n".
PyObject *write_table(PyObject *, PyObject *args) {
  Rows rows;
  Buffer widths;
  if (!take_table(args, rows, widths, false)) return nullptr;
  const int64_t *const width = widths.data<int64_t>();
  size_t line = 2 * (N_CELLS - 1) + 1;
  for (int c = 0; c < N_CELLS; c++) {
    if (width[c] < 0 || width[c] > (int64_t(1) << 20)) {
      PyErr_SetString(PyExc_ValueError, "write_table: widths outside 0..2^20");
      return nullptr;
    }
    line += size_t(width[c]);
  }  // every cell fits its column (checked below), so a line is at most `line` plus its strings' extra bytes
  PyObject *result = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(size_t(rows.n) * line + rows.text));
  if (result == nullptr) return nullptr;
  char *const start = PyBytes_AS_STRING(result);
  char *out = start;
  bool fits = true;
  Py_BEGIN_ALLOW_THREADS
  char scratch[2 * MAX_FIXED + 4];
  for (Py_ssize_t i = 0; i < rows.n && fits; i++) {
    for (int c = 0; c < N_CELLS && fits; c++) {
      const std::string_view cell = table_cell(rows, c, i, scratch);
      const int64_t pad = width[c] - int64_t(code_points(cell));
      fits = pad >= 0;
      if (!fits) break;
      if (c) out = put(out, "  ");
      std::memset(out, ' ', size_t(pad));
      out = put(out + pad, cell);
    }
    *out++ = '\n';
  }
  Py_END_ALLOW_THREADS
  if (!fits) {
    Py_DECREF(result);
    PyErr_SetString(PyExc_ValueError, "write_table: a cell is wider than its column (measure with table_widths)");
    return nullptr;
  }
  if (_PyBytes_Resize(&result, out - start) != 0) return nullptr;
  return result;
}

// Value i of float64s that start at `p`, at any alignment (an 8-byte load: a flat-2 row's probabilities read
// where a Parquet page holds them start 4 bytes past a multiple of 8 every other row).
inline double value_at(const unsigned char *p, int64_t i) {
  double v;
  std::memcpy(&v, p + 8 * i, 8);
  return v;
}

// numpy's pairwise summation (loops_utils.h: DOUBLE_pairwise_sum), in its order, so that a round's sum is
// bit for bit np.add.reduceat's: the first value, plus this sum of the rest.
double pairwise_sum(const unsigned char *a, int64_t n) {
  if (n < 8) {
    double res = -0.0;
    for (int64_t i = 0; i < n; i++) res += value_at(a, i);
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; j++) r[j] = value_at(a, j);
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; j++) r[j] += value_at(a, i + j);
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += value_at(a, i);
    return res;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + 8 * half, n - half);
}

// The smallest of n float64s at `first` (NaN if one is NaN) and their sum as np.add.reduceat sums them, NaN for
// both if n = 0. Eight running minima and numpy's eight partial sums: no chain of dependent compares or adds.
void min_sum(const unsigned char *first, int64_t n, double &low, double &sum) {
  if (n <= 0) {
    low = sum = NAN;
    return;
  }
  double m[8];
  bool nan = false;
  for (int j = 0; j < 8; j++) m[j] = value_at(first, 0);
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) {
      const double v = value_at(first, i + j);
      nan |= v != v;
      m[j] = v < m[j] ? v : m[j];
    }
  for (int64_t i = n - n % 8; i < n; i++) {
    const double v = value_at(first, i);
    nan |= v != v;
    m[0] = v < m[0] ? v : m[0];
  }
  low = nan ? NAN : std::min({m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]});
  sum = value_at(first, 0) + pairwise_sum(first + 8, n - 1);
}

// round_min_sum(values, offsets, low, total): for each segment offsets[r]:offsets[r + 1] of values, its
// minimum (NaN if any value is NaN, or the segment is empty) and its sum as np.add.reduceat sums it (NaN for an
// empty one), into low, total.
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
    for (Py_ssize_t r = 0; r < rounds; r++)
      min_sum(reinterpret_cast<const unsigned char *>(v + off[r]), off[r + 1] - off[r], lo[r], sum[r]);
    Py_END_ALLOW_THREADS
  }
  for (Py_buffer *view : {&values, &offsets, &low, &total})
    if (view->obj != nullptr) PyBuffer_Release(view);
  if (!ok) return nullptr;
  Py_RETURN_NONE;
}


// Offsets (rows + 1, int64) that start at 0, never fall and stay within `items` values.
bool valid_offsets(const Buffer &offsets, Py_ssize_t rows, Py_ssize_t items, const char *what) {
  const int64_t *off = offsets.data<int64_t>();
  bool ok = off[0] == 0;
  for (Py_ssize_t i = 0; ok && i < rows; i++) ok = off[i] <= off[i + 1];
  if (!ok || off[rows] > items) PyErr_Format(PyExc_ValueError, "check_flat: %s offsets outside their values", what);
  return ok && off[rows] <= items;
}

// Byte spans start[i]..end[i] (rows of int64) within `size` bytes.
bool valid_spans(const Buffer &start, const Buffer &end, Py_ssize_t size) {
  const int64_t *first = start.data<int64_t>(), *last = end.data<int64_t>();
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < start.size(); i++) ok = 0 <= first[i] && first[i] <= last[i] && last[i] <= size;
  if (!ok) PyErr_SetString(PyExc_ValueError, "check_flat: probability spans outside their bytes");
  return ok;
}

// A validity array: one bool per item, or none (length 0) when every item is there.
bool there(const Buffer &valid, int64_t at) { return valid.size() == 0 || valid.data<bool>()[at]; }

// An absence array: one bool per row (its list is NULL), or none (length 0) when no list is.
bool absent(const Buffer &absence, int64_t row) { return absence.size() != 0 && absence.data<bool>()[row]; }

// check_flat(budget, doc_off, doc_codes, n_codes, empty, doc_y, y_off, y, y_valid, y_absent, m_off, m, m_absent,
//            chosen_off, chosen_idx, chosen_map, stop_off, stop, ry_off, ry, ry_valid, ry_any, p_start, p_end, p_bytes,
//            sum_limit, y_tolerance, bad, budget_f, n_docs, n_rounds, first_support, chosen, score, p, full):
// parquet_batch.check_batch's rules for the rows of a flat-2 batch whose round lists, document and chosen id lists
// and probabilities are never NULL, and the arrays it gathers that are not views of the batch. Offsets are int64
// from 0 (rows + 1): the documents of row i are doc_off[i]..doc_off[i + 1] (doc_codes: their dictionary codes,
// -1 for NULL; `empty` the code of "" or -1; doc_y: pool.y at the documents, NaN where unknown), its rounds
// chosen_off[i]..; chosen_map takes a chosen id's code to its document code (-1: not a document id; a NULL id's
// code is -1). Values are float64, NaN for NULL; a validity array holds one bool per value, or none when all are
// there (ry_any: false when no round score is); y_absent, m_absent one per row (or none: no list NULL). Row i's
// probabilities are the bytes p_start[i]..p_end[i] of p_bytes (T x N little-endian float64 in a well-shaped row,
// at any alignment: an Arrow column's buffer, or the pages of a column chunk that plain_spans read). The outputs
// have one entry per
// row, per document (first_support is written only where a round lacks full support: the caller zeroes it) and
// per round. A row with a round list or probabilities of another length is suspect and its rounds left out.
PyObject *check_flat(PyObject *, PyObject *args) {
  PyObject *in[23], *outs[9];
  Py_ssize_t n_codes, empty;
  int ry_any;
  double sum_limit, y_tolerance;
  if (!PyArg_ParseTuple(args, "OOOnnOOOOOOOOOOOOOOOOpOOOddOOOOOOOOO", &in[0], &in[1], &in[2], &n_codes, &empty,
                        &in[3], &in[4], &in[5], &in[6], &in[7], &in[8], &in[9], &in[10], &in[11], &in[12], &in[13],
                        &in[14], &in[15], &in[16], &in[17], &in[18], &ry_any, &in[19], &in[21], &in[20], &sum_limit,
                        &y_tolerance, &outs[0], &outs[1], &outs[2], &outs[3], &outs[4], &outs[5], &outs[6], &outs[7],
                        &outs[8]))
    return nullptr;
  Buffer budget, doc_off, codes, doc_y, y_off, yv, y_valid, y_absent, m_off, mv, m_absent, ch_off, ch_idx, ch_map,
      s_off, sv, ry_off, ryv, ry_valid, p_start, p_end, pb;
  if (!budget.take(in[0], "lq", 8, -1, "budget")) return nullptr;
  const Py_ssize_t b = budget.size();
  if (!doc_off.take(in[1], "lq", 8, b + 1, "doc_off") || !codes.take(in[2], "i", 4, -1, "doc_codes") ||
      !doc_y.take(in[3], "d", 8, -1, "doc_y") || !y_off.take(in[4], "lq", 8, b + 1, "y_off") ||
      !yv.take(in[5], "d", 8, -1, "y") || !y_valid.take(in[6], "?", 1, -1, "y_valid") ||
      !y_absent.take(in[7], "?", 1, -1, "y_absent") || !m_off.take(in[8], "lq", 8, b + 1, "m_off") ||
      !mv.take(in[9], "d", 8, -1, "m") || !m_absent.take(in[10], "?", 1, -1, "m_absent") ||
      !ch_off.take(in[11], "lq", 8, b + 1, "chosen_off") || !ch_idx.take(in[12], "i", 4, -1, "chosen_idx") ||
      !ch_map.take(in[13], "i", 4, -1, "chosen_map") || !s_off.take(in[14], "lq", 8, b + 1, "stop_off") ||
      !sv.take(in[15], "d", 8, -1, "stop") || !ry_off.take(in[16], "lq", 8, b + 1, "ry_off") ||
      !ryv.take(in[17], "d", 8, -1, "ry") || !ry_valid.take(in[18], "?", 1, -1, "ry_valid") ||
      !p_start.take(in[19], "lq", 8, b, "p_start") || !p_end.take(in[21], "lq", 8, b, "p_end") ||
      !pb.take(in[20], "bB", 1, -1, "p_bytes"))
    return nullptr;
  if (!valid_offsets(doc_off, b, codes.size(), "doc") || !valid_offsets(y_off, b, yv.size(), "y") ||
      !valid_offsets(m_off, b, mv.size(), "m") || !valid_offsets(ch_off, b, ch_idx.size(), "chosen") ||
      !valid_offsets(s_off, b, sv.size(), "stop") ||
      !valid_offsets(ry_off, b, ry_any ? ryv.size() : PY_SSIZE_T_MAX, "ry") || !valid_spans(p_start, p_end, pb.size()))
    return nullptr;
  const Py_ssize_t d = doc_off.data<int64_t>()[b], r = ch_off.data<int64_t>()[b];
  if (doc_y.size() != d || (y_valid.size() && y_valid.size() != yv.size()) || (y_absent.size() && y_absent.size() != b) ||
      (m_absent.size() && m_absent.size() != b) || (ry_any && ry_valid.size() && ry_valid.size() != ryv.size())) {
    PyErr_SetString(PyExc_ValueError, "check_flat: doc_y, a validity or an absence array of another length");
    return nullptr;
  }
  Buffer bad, budget_f, n_docs, n_rounds, first, chosen, score, p, full;
  if (!bad.take(outs[0], "?", 1, b, "bad", true) || !budget_f.take(outs[1], "d", 8, b, "budget_f", true) ||
      !n_docs.take(outs[2], "lq", 8, b, "n_docs", true) || !n_rounds.take(outs[3], "lq", 8, b, "n_rounds", true) ||
      !first.take(outs[4], "lq", 8, d, "first_support", true) || !chosen.take(outs[5], "lq", 8, r, "chosen", true) ||
      !score.take(outs[6], "d", 8, r, "y", true) || !p.take(outs[7], "d", 8, r, "p", true) ||
      !full.take(outs[8], "?", 1, r, "full_support", true))
    return nullptr;
  // Allocated while the GIL is held, so that running out of memory raises MemoryError (a bad_alloc thrown with
  // the GIL released would end the process).
  std::vector<int64_t> stamp, where;  // the row that last held a code, and its first place there
  try {
    stamp.assign(size_t(std::max<Py_ssize_t>(n_codes, 0)), -1);
    where.resize(stamp.size());
  } catch (const std::bad_alloc &) {
    return PyErr_NoMemory();
  }
  Py_BEGIN_ALLOW_THREADS
  const int64_t *const budgets = budget.data<int64_t>(), *const doff = doc_off.data<int64_t>();
  const int64_t *const yoff = y_off.data<int64_t>(), *const moff = m_off.data<int64_t>();
  const int64_t *const coff = ch_off.data<int64_t>(), *const soff = s_off.data<int64_t>();
  const int64_t *const royff = ry_off.data<int64_t>();
  const int64_t *const pstart = p_start.data<int64_t>(), *const pend = p_end.data<int64_t>();
  const int32_t *const code_of = codes.data<int32_t>(), *const idx = ch_idx.data<int32_t>();
  const int32_t *const map = ch_map.data<int32_t>();
  const Py_ssize_t map_size = ch_map.size();
  const double *const dy = doc_y.data<double>(), *const y = yv.data<double>(), *const m = mv.data<double>();
  const double *const s = sv.data<double>(), *const ry = ryv.data<double>();
  const unsigned char *const bytes = pb.data<unsigned char>();
  bool *const bad_o = bad.out<bool>(), *const full_o = full.out<bool>();
  double *const budget_o = budget_f.out<double>(), *const score_o = score.out<double>(), *const p_o = p.out<double>();
  int64_t *const n_o = n_docs.out<int64_t>(), *const t_o = n_rounds.out<int64_t>();
  int64_t *const first_o = first.out<int64_t>(), *const chosen_o = chosen.out<int64_t>();
  for (Py_ssize_t i = 0; i < b; i++) {
    const int64_t d0 = doff[i], n = doff[i + 1] - d0, r0 = coff[i], t = coff[i + 1] - r0;
    const int64_t y0 = yoff[i], m0 = moff[i], s0 = soff[i], ry0 = royff[i], p0 = pstart[i];
    const double budget_i = double(budgets[i]);
    n_o[i] = n, t_o[i] = t, budget_o[i] = budget_i;
    const bool shaped = (soff[i + 1] - s0 == t) & (royff[i + 1] - ry0 == t) & (pend[i] - p0 == t * n * 8);
    bool suspect = (budgets[i] < 1) | (n == 0) | (t == 0) | (double(t) > budget_i) | !shaped;
    suspect |= (!absent(y_absent, i) && yoff[i + 1] - y0 != n) || (!absent(m_absent, i) && moff[i + 1] - m0 != n);
    for (int64_t k = 0; k < n; k++) {
      const int32_t c = code_of[d0 + k];
      if (c < 0 || c >= n_codes || c == empty || stamp[size_t(c)] == i) {
        suspect = true;  // no document id, "" or a repeated one
      } else {
        stamp[size_t(c)] = i, where[size_t(c)] = k;
      }
    }
    for (int64_t k = y0; k < yoff[i + 1]; k++) suspect |= there(y_valid, k) && !((y[k] >= -1) & (y[k] <= 1));
    for (int64_t k = m0; k < moff[i + 1]; k++) suspect |= !std::isfinite(m[k]);
    bool varying = false, all_chosen = true;
    for (int64_t k = 0; k < t; k++) {
      const int64_t at = r0 + k;
      if (!shaped) {
        chosen_o[at] = -1, score_o[at] = p_o[at] = NAN, full_o[at] = false;
        continue;
      }
      const int32_t ci = idx[at];
      const int32_t c = ci >= 0 && ci < map_size ? map[ci] : -1;
      const int64_t j = c >= 0 && c < n_codes && stamp[size_t(c)] == i ? where[size_t(c)] : -1;
      const unsigned char *const probs = bytes + p0 + k * n * 8;  // the round's n probabilities
      double low, total;
      min_sum(probs, n, low, total);
      const bool ry_there = ry_any && there(ry_valid, ry0 + k);
      const double pj = j >= 0 ? value_at(probs, j) : NAN, stop_k = s[s0 + k], ry_k = ry_there ? ry[ry0 + k] : NAN;
      const double pool_y = j >= 0 ? dy[d0 + j] : NAN, y_k = ry_there ? ry_k : pool_y;
      suspect |= (j < 0) | !(low >= 0) | !(std::fabs(total - 1.0) <= sum_limit) | !(pj > 0) | !(stop_k >= 0) |
                 !(stop_k < 1) | ((k == 0) & (stop_k != 0)) | std::isnan(y_k) |
                 (ry_there && !((ry_k >= -1) & (ry_k <= 1))) | (std::fabs(ry_k - pool_y) > y_tolerance);
      chosen_o[at] = j, score_o[at] = y_k, p_o[at] = pj, full_o[at] = low > 0;
      varying |= !(low > 0), all_chosen &= j >= 0;
    }
    if (shaped && varying && all_chosen) {  // rare: a zero probability somewhere; each document's first positive round
      for (int64_t q = 0; q < n; q++) {
        int64_t round = INT64_MAX;  // columns.NEVER
        for (int64_t k = 0; k < t && round == INT64_MAX; k++)
          if (value_at(bytes + p0, k * n + q) > 0) round = k;
        first_o[d0 + q] = round;
      }
    }
    bad_o[i] = suspect;
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// plain_spans(chunk, starts, ends) -> bool: where each value of a Parquet column chunk of a REQUIRED BYTE_ARRAY
// column lies in `chunk` (the chunk's bytes, page headers included: a view of the file's memory map), when every
// page is an uncompressed PLAIN data page (v1, or v2 without levels) and the pages hold exactly one value per
// entry of starts and ends; false (nothing promised about starts and ends) for anything else, e.g. a dictionary
// page, another encoding, a damaged header: the caller then has pyarrow decode the column, as for any file. The
// page headers are Thrift's compact protocol (parquet.thrift: PageHeader, DataPageHeader, DataPageHeaderV2);
// fields this does not need (statistics, the CRC) are skipped.
struct Compact {  // a Thrift compact-protocol reader over [at, end); ok turns false at the first byte out of place
  const unsigned char *at, *end;
  bool ok = true;

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; at < end && shift < 64; shift += 7) {
      const unsigned char c = *at++;
      value |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) return value;
    }
    ok = false;
    return 0;
  }
  int64_t zigzag() {
    const uint64_t v = varint();
    return int64_t(v >> 1) ^ -int64_t(v & 1);
  }
  void bytes(uint64_t n) {
    if (uint64_t(end - at) < n) ok = false;
    else at += n;
  }
  // Skip one value of compact type `type` (a bool in a list or set takes a byte; in a field, none).
  void skip(int type, int depth, bool in_field) {
    if (depth > 16) ok = false;
    if (!ok) return;
    switch (type) {
      case 1: case 2: if (!in_field) bytes(1); break;
      case 3: bytes(1); break;
      case 4: case 5: case 6: varint(); break;
      case 7: bytes(8); break;
      case 8: bytes(varint()); break;
      case 9: case 10: {
        if (at >= end) { ok = false; break; }
        const unsigned char head = *at++;
        const uint64_t size = (head >> 4) == 15 ? varint() : uint64_t(head >> 4);
        for (uint64_t k = 0; ok && k < size; k++) skip(head & 15, depth + 1, false);
        break;
      }
      case 11: {
        const uint64_t size = varint();
        if (size == 0) break;
        if (at >= end) { ok = false; break; }
        const unsigned char kinds = *at++;
        for (uint64_t k = 0; ok && k < size; k++) {
          skip(kinds >> 4, depth + 1, false);
          skip(kinds & 15, depth + 1, false);
        }
        break;
      }
      case 12: fields(depth + 1, [](int, int) { return false; }); break;
      default: ok = false;
    }
  }
  // Walk a struct's fields to its STOP: on_field(id, type) reads a field it wants and returns true; others are skipped.
  template <typename F>
  void fields(int depth, F &&on_field) {
    int64_t last = 0;
    while (ok) {
      if (at >= end) { ok = false; return; }
      const unsigned char head = *at++;
      const int type = head & 15;
      if (type == 0) return;
      last = (head >> 4) ? last + (head >> 4) : zigzag();
      if (!on_field(int(last), type)) skip(type, depth, true);
    }
  }
  int64_t i32(int type) {
    if (type != 5) ok = false;
    return ok ? zigzag() : 0;
  }
};

struct PageHeader {
  int64_t type = -1, uncompressed = -1, compressed = -1, values = -1, encoding = -1;
  int64_t def_bytes = 0, rep_bytes = 0;  // v2: the levels' bytes, before the values
  int64_t def_encoding = -1, rep_encoding = -1;  // v1: the levels' encodings (each section starts with its length)
};

PageHeader page_header(Compact &in) {
  PageHeader page;
  auto data_page = [&](bool v2) {
    in.fields(1, [&](int id, int type) {
      if (id == 1) page.values = in.i32(type);
      else if (id == (v2 ? 4 : 2)) page.encoding = in.i32(type);
      else if (v2 && id == 5) page.def_bytes = in.i32(type);
      else if (v2 && id == 6) page.rep_bytes = in.i32(type);
      else if (!v2 && id == 3) page.def_encoding = in.i32(type);
      else if (!v2 && id == 4) page.rep_encoding = in.i32(type);
      else return false;
      return true;
    });
  };
  in.fields(0, [&](int id, int type) {
    if (id == 1) page.type = in.i32(type);
    else if (id == 2) page.uncompressed = in.i32(type);
    else if (id == 3) page.compressed = in.i32(type);
    else if ((id == 5 || id == 8) && type == 12) data_page(id == 8);
    else return false;
    return true;
  });
  return page;
}

bool spans_of_pages(const unsigned char *chunk, int64_t size, int64_t rows, int64_t *starts, int64_t *ends) {
  constexpr int64_t DATA_PAGE = 0, DATA_PAGE_V2 = 3, PLAIN = 0;
  int64_t at = 0, row = 0;
  while (at < size) {
    Compact in{chunk + at, chunk + size};
    const PageHeader page = page_header(in);
    const int64_t body = in.at - chunk;
    if (!in.ok || (page.type != DATA_PAGE && page.type != DATA_PAGE_V2) || page.encoding != PLAIN ||
        page.def_bytes != 0 || page.rep_bytes != 0 || page.values < 0 || page.compressed < 0 || page.compressed != page.uncompressed ||
        page.compressed > size - body || page.values > rows - row)
      return false;
    const int64_t page_end = body + page.compressed;
    int64_t q = body;
    for (int64_t k = 0; k < page.values; k++, row++) {
      if (page_end - q < 4) return false;
      uint32_t length;
      std::memcpy(&length, chunk + q, 4);  // little-endian, as Parquet writes it (and x86 and ARM read it)
      q += 4;
      if (int64_t(length) > page_end - q) return false;
      starts[row] = q, ends[row] = q + length;
      q += length;
    }
    if (q != page_end) return false;
    at = page_end;
  }
  return row == rows;
}

PyObject *plain_spans(PyObject *, PyObject *args) {
  PyObject *chunk_obj, *starts_obj, *ends_obj;
  if (!PyArg_ParseTuple(args, "OOO", &chunk_obj, &starts_obj, &ends_obj)) return nullptr;
  Buffer chunk, starts, ends;
  if (!chunk.take(chunk_obj, "bB", 1, -1, "chunk") || !starts.take(starts_obj, "lq", 8, -1, "starts", true) ||
      !ends.take(ends_obj, "lq", 8, starts.size(), "ends", true))
    return nullptr;
  bool found;
  Py_BEGIN_ALLOW_THREADS
  found = spans_of_pages(chunk.data<unsigned char>(), chunk.size(), starts.size(), starts.out<int64_t>(),
                         ends.out<int64_t>());
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(found);
}

// A 64-bit hash of bytes: eight at a time, each word mixed (MurmurHash3's finaliser) into a multiply-rotate state,
// the length mixed in first. Not keyed: a file can make ids collide on purpose, which costs only the exact search.
uint64_t mix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  return k ^ (k >> 33);
}

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = mix64(s.size() + 0x9e3779b97f4a7c15ull);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t k;
    std::memcpy(&k, s.data() + i, 8);
    const uint64_t x = h ^ mix64(k);
    h = (x << 27 | x >> 37) * 0x9e3779b97f4a7c15ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return mix64(h ^ mix64(tail ^ 0x5bd1e9955bd1e995ull));
}

PyObject *id_hashes(PyObject *, PyObject *args) {
  PyObject *ids, *out_obj;
  Buffer out;
  if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &ids, &out_obj) ||
      !out.take(out_obj, "LQ", 8, PyList_GET_SIZE(ids), "out", true))
    return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(ids);
  std::vector<std::string_view> texts;
  std::vector<bool> none(size_t(n), false);
  texts.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PyList_GET_ITEM(ids, i);
    Py_ssize_t size = 0;
    const char *chars = item == Py_None ? "" : PyUnicode_AsUTF8AndSize(item, &size);
    if (chars == nullptr) return nullptr;  // not a str (TypeError), or not encodable
    none[size_t(i)] = item == Py_None;
    texts.emplace_back(chars, size_t(size));
  }
  uint64_t *hashes = out.out<uint64_t>();
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < n; i++) hashes[i] = none[size_t(i)] ? 0 : hash_bytes(texts[size_t(i)]);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// plain_doubles(chunk, list_level, max_def, offsets, values, valid, absent) -> int: a column chunk of a list of
// float64 (Parquet's three-level list: max repetition level 1) decoded from uncompressed PLAIN pages (v1 with RLE
// levels, or v2), as pyarrow decodes it: each row's items at offsets (rows + 1, from 0), the items' values (NaN
// for a NULL item) and whether each is there, and whether each row's list is NULL. list_level is the definition
// level of an empty list (0: the list is REQUIRED, 1: OPTIONAL); max_def is list_level + 1 (REQUIRED items) or + 2
// (OPTIONAL items). Returns the number of items, or -1 (nothing promised about the outputs) for anything else:
// a dictionary page, another encoding, a level out of range, a damaged header, more rows or items than the
// outputs hold. The caller then has pyarrow decode the column and report what is wrong with it.

// Levels of bit width `width` (1 to 8) in the RLE / bit-packed hybrid encoding over [at, end), n of them into out.
bool hybrid_levels(const unsigned char *at, const unsigned char *end, int width, int64_t n, uint8_t *out) {
  const int value_bytes = (width + 7) / 8;
  const unsigned mask = (1u << width) - 1;
  int64_t got = 0;
  while (got < n) {
    Compact in{at, end};
    const uint64_t header = in.varint();
    if (!in.ok || (header >> 1) == 0) return false;  // a run of nothing would never end
    at = in.at;
    if (header & 1) {  // bit-packed: groups of 8 values, least significant bit first
      const uint64_t groups = header >> 1;
      if (groups > uint64_t(end - at) / uint64_t(width)) return false;
      const int64_t count = int64_t(std::min<uint64_t>(groups * 8, uint64_t(n - got)));
      for (int64_t k = 0; k < count; k++) {
        const uint64_t bit = uint64_t(k) * unsigned(width), byte = bit / 8;
        unsigned word = at[byte];
        if (byte + 1 < groups * unsigned(width)) word |= unsigned(at[byte + 1]) << 8;
        out[got + k] = uint8_t((word >> (bit % 8)) & mask);
      }
      got += count;
      at += groups * unsigned(width);
    } else {  // a run of one value
      if (end - at < value_bytes) return false;
      unsigned value = 0;
      std::memcpy(&value, at, size_t(value_bytes));
      at += value_bytes;
      if (value > mask) return false;
      const int64_t count = int64_t(std::min<uint64_t>(header >> 1, uint64_t(n - got)));
      std::memset(out + got, int(value), size_t(count));
      got += count;
    }
  }
  return true;
}

int bit_width(int64_t max_level) {
  int width = 0;
  while ((int64_t(1) << width) <= max_level) width++;
  return width;
}

int64_t doubles_of_pages(const unsigned char *chunk, int64_t size, int64_t list_level, int64_t max_def, int64_t rows,
                         int64_t cap, int64_t *offsets, double *values, bool *valid, bool *absent,
                         std::vector<uint8_t> &reps, std::vector<uint8_t> &defs) {
  constexpr int64_t DATA_PAGE = 0, DATA_PAGE_V2 = 3, PLAIN = 0, RLE = 3;
  const int def_width = bit_width(max_def);
  int64_t at = 0, row = -1, item = 0;
  while (at < size) {
    Compact in{chunk + at, chunk + size};
    const PageHeader page = page_header(in);
    const int64_t body = in.at - chunk;
    const bool v2 = page.type == DATA_PAGE_V2;
    if (!in.ok || (page.type != DATA_PAGE && !v2) || page.encoding != PLAIN || page.values < 0 ||
        page.compressed < 0 || page.compressed != page.uncompressed || page.compressed > size - body ||
        (!v2 && (page.def_encoding != RLE || page.rep_encoding != RLE)))
      return -1;
    const unsigned char *q = chunk + body, *const page_end = q + page.compressed;
    const unsigned char *level_sections[2];  // repetition, definition: [start, end) each
    const unsigned char *level_ends[2];
    for (int k = 0; k < 2; k++) {
      int64_t length = v2 ? (k == 0 ? page.rep_bytes : page.def_bytes) : 0;
      if (!v2) {
        if (page_end - q < 4) return -1;
        uint32_t prefix;
        std::memcpy(&prefix, q, 4);
        q += 4, length = int64_t(prefix);
      }
      if (length < 0 || length > page_end - q) return -1;
      level_sections[k] = q, level_ends[k] = q + length;
      q += length;
    }
    const auto n = size_t(page.values);
    reps.resize(n), defs.resize(n);
    if (!hybrid_levels(level_sections[0], level_ends[0], 1, page.values, reps.data()) ||
        !hybrid_levels(level_sections[1], level_ends[1], def_width, page.values, defs.data()))
      return -1;
    for (size_t k = 0; k < n; k++) {
      const int64_t def = defs[k];
      if (def > max_def) return -1;
      if (reps[k] == 0) {
        if (++row >= rows) return -1;
        offsets[row] = item, absent[row] = def < list_level;
      } else if (row < 0 || def <= list_level) {
        return -1;  // a row's continuation before any row, or an empty or NULL list inside a row
      }
      if (def <= list_level) continue;
      if (item >= cap) return -1;
      valid[item] = def == max_def;
      if (valid[item]) {
        if (page_end - q < 8) return -1;
        std::memcpy(values + item, q, 8);  // little-endian, as Parquet writes it
        q += 8;
      } else {
        values[item] = NAN;
      }
      item++;
    }
    if (q != page_end) return -1;
    at = body + page.compressed;
  }
  if (row + 1 != rows) return -1;
  offsets[rows] = item;
  return item;
}

PyObject *plain_doubles(PyObject *, PyObject *args) {
  PyObject *chunk_obj, *offsets_obj, *values_obj, *valid_obj, *absent_obj;
  long long list_level, max_def;
  if (!PyArg_ParseTuple(args, "OLLOOOO", &chunk_obj, &list_level, &max_def, &offsets_obj, &values_obj, &valid_obj,
                        &absent_obj))
    return nullptr;
  Buffer chunk, offsets, values, valid, absent;
  if (!chunk.take(chunk_obj, "bB", 1, -1, "chunk") || !absent.take(absent_obj, "?", 1, -1, "absent", true) ||
      !offsets.take(offsets_obj, "lq", 8, absent.size() + 1, "offsets", true) ||
      !values.take(values_obj, "d", 8, -1, "values", true) ||
      !valid.take(valid_obj, "?", 1, values.size(), "valid", true))
    return nullptr;
  if (list_level < 0 || list_level > 1 || max_def < list_level + 1 || max_def > list_level + 2) {
    PyErr_SetString(PyExc_ValueError, "plain_doubles: list_level must be 0 or 1, max_def list_level + 1 or + 2");
    return nullptr;
  }
  std::vector<uint8_t> reps, defs;  // a page's levels (reserved here: the GIL is held, so a bad_alloc is a MemoryError)
  try {
    reps.reserve(1 << 16), defs.reserve(1 << 16);
  } catch (const std::bad_alloc &) {
    return PyErr_NoMemory();
  }
  int64_t items;
  Py_BEGIN_ALLOW_THREADS
  try {
    items = doubles_of_pages(chunk.data<unsigned char>(), chunk.size(), list_level, max_def, absent.size(),
                             values.size(), offsets.out<int64_t>(), values.out<double>(), valid.out<bool>(),
                             absent.out<bool>(), reps, defs);
  } catch (const std::bad_alloc &) {
    items = -1;  // a page of more levels than memory holds: pyarrow decodes the column instead
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(items);
}

PyMethodDef methods[] = {
    {"write_lines", write_lines, METH_VARARGS,
     "write_lines(ids, tasks, rounds, numbers, hidden, lower, upper) -> bytes: the JSON lines of n estimates "
     "(ids, tasks: lists of str; rounds: int64; numbers: a tuple of the 10 float64 arrays of json_lines.NUMBERS; "
     "hidden: bool, the support interval applies; lower, upper: float64)."},
    {"table_widths", table_widths, METH_VARARGS,
     "table_widths(ids, tasks, rounds, numbers, hidden, lower, upper, widths) -> None: each column's widest cell "
     "of the `cess estimate` table among the rows, into widths (14 int64, raised where a cell is wider)."},
    {"write_table", write_table, METH_VARARGS,
     "write_table(ids, tasks, rounds, numbers, hidden, lower, upper, widths) -> bytes: the rows' lines of the "
     "`cess estimate` table, each cell right-aligned to its column's width (14 int64), each line ending in a newline."},
    {"round_min_sum", round_min_sum, METH_VARARGS,
     "round_min_sum(values, offsets, low, total) -> None: each segment's minimum (NaN if it holds a NaN or is "
     "empty) and sum (NaN if empty) of float64 values at int64 offsets, into the float64 arrays low and total."},
    {"plain_spans", plain_spans, METH_VARARGS,
     "plain_spans(chunk, starts, ends) -> bool: each value's byte span in a Parquet column chunk of uncompressed PLAIN "
     "pages of a REQUIRED BYTE_ARRAY column, into the int64 arrays starts and ends (False: pages of another kind)."},
    {"id_hashes", id_hashes, METH_VARARGS,
     "id_hashes(ids, out) -> None: a 64-bit hash of each id's UTF-8 (ids: a list of str or None, None hashed as 0), "
     "into the uint64 array out."},
    {"plain_doubles", plain_doubles, METH_VARARGS,
     "plain_doubles(chunk, list_level, max_def, offsets, values, valid, absent) -> int: a column chunk of a list of "
     "float64 in uncompressed PLAIN pages decoded into the given arrays; the number of items, or -1 for pages of "
     "another kind."},
    {"check_flat", check_flat, METH_VARARGS,
     "check_flat(...) -> None: parquet_batch.check_batch's suspect rows and columns of a flat-2 batch without NULLs, "
     "into the given arrays (see _kernels.cpp)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "Compiled kernels of the columns path (json_lines, parquet_batch).",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kernels() { return PyModule_Create(&module); }
