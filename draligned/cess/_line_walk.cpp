// The compiled walk of draligned.cess.line_chunk: a JSON Lines range read line by line with simdjson's DOM
// (the parse pysimdjson wraps, same version: its simdjson.h/simdjson.cpp, found by setup.py), each line
// either gathered (its line number, id and task id into a LineChunk's lists, its values into one buffer per
// field for the whole run of lines) or declined (then the Python paths judge it as before).
//
// A line is gathered only when it has exactly the canonical shape LineChunk.take_line accepts: an object of
// the five required fields and optionally "ranking" (a string of the enum), each named once; a pool of
// doc_ids (distinct non-empty strings) and optionally y and m, arrays of n numbers; 1..budget rounds, each an
// object of probs (n numbers), chosen (a pool id), stop_prob (a number) and optionally y (a number). Anything
// else is declined: a backslash anywhere on the line (escapes), null, a big integer (simdjson's BIGINT_ERROR),
// a nested array, an integer above INT64_MAX, a byte-order mark, a line not starting with '{'.
// Numbers are converted as pysimdjson's as_buffer(of_type="d") converts them: simdjson's get_double. Every
// value is read as its type (each array item as a number, a string or an object), so a nested array is
// declined here, not flattened: unlike Python's walk, this one needs no count of the line's '['.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

#include "simdjson.h"
#include "simdjson.cpp"  // one translation unit: the simdjson the installed pysimdjson ships

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

enum Out { LINES, IDS, TASKS, N_OUT };

struct Line {
  std::string_view tid, task;
  int64_t budget = 0;
  size_t n = 0;
  std::vector<double> doc_y, doc_m, probs, stop, round_y;
  std::vector<std::pair<std::string_view, int64_t>> ids;  // sorted by id, for distinctness and lookup
  std::vector<int64_t> chosen;

  void clear() {  // keeps the vectors' storage for the next line
    doc_y.clear(), doc_m.clear(), probs.clear(), stop.clear(), round_y.clear(), ids.clear(), chosen.clear();
  }
};

bool number(element value, double &out) {
  // A double or an int64, converted as pysimdjson's flatten_array<double> converts it; an integer above
  // INT64_MAX (simdjson's UINT64) is declined.
  return value.type() != element_type::UINT64 && !value.get_double().get(out);
}

bool numbers(element value, size_t n, std::vector<double> &out) {
  simdjson::dom::array array;
  if (value.get_array().get(array) || array.size() != n) return false;
  for (element item : array) {
    double x;
    if (!number(item, x)) return false;
    out.push_back(x);
  }
  return true;
}

bool text(element value, std::string_view &out) {
  return !value.get_string().get(out) && !out.empty();
}

// The fields of an object by name: each value into values[k] for names[k], the names present as bits of
// seen; false when the value is not an object, or a field is unknown or named twice.
template <size_t N>
bool fields(element value, const std::string_view (&names)[N], element (&values)[N], unsigned &seen) {
  simdjson::dom::object object;
  if (value.get_object().get(object)) return false;
  seen = 0;
  for (auto field : object) {
    size_t k = 0;
    while (k < N && field.key != names[k]) k++;
    if (k == N || (seen & (1u << k))) return false;
    seen |= 1u << k;
    values[k] = field.value;
  }
  return true;
}

bool pool(element value, Line &line) {
  static constexpr std::string_view names[] = {"doc_ids", "y", "m"};
  element values[3];
  unsigned seen;
  if (!fields(value, names, values, seen)) return false;
  auto [doc_ids, y, m] = values;
  simdjson::dom::array ids;
  if (!(seen & 1) || doc_ids.get_array().get(ids) || ids.size() == 0) return false;
  int64_t i = 0;
  for (element id : ids) {
    std::string_view name;
    if (!text(id, name)) return false;
    line.ids.emplace_back(name, i++);
  }
  line.n = line.ids.size();
  std::sort(line.ids.begin(), line.ids.end());
  for (size_t k = 1; k < line.n; k++)
    if (line.ids[k - 1].first == line.ids[k].first) return false;
  if (seen & 2) {
    if (!numbers(y, line.n, line.doc_y)) return false;
  } else {
    line.doc_y.assign(line.n, std::numeric_limits<double>::quiet_NaN());
  }
  if (seen & 4) {
    if (!numbers(m, line.n, line.doc_m)) return false;
  } else {
    line.doc_m.assign(line.n, 0.0);
  }
  return true;
}

bool round(element value, Line &line) {
  static constexpr std::string_view names[] = {"probs", "chosen", "stop_prob", "y"};
  element values[4];
  unsigned seen;
  if (!fields(value, names, values, seen)) return false;
  auto [probs, chosen, stop, y] = values;
  std::string_view name;
  double c, score = std::numeric_limits<double>::quiet_NaN();
  if ((seen & 7) != 7 || !text(chosen, name) || !number(stop, c) || ((seen & 8) && !number(y, score))) return false;
  auto at = std::lower_bound(line.ids.begin(), line.ids.end(), std::make_pair(name, int64_t(-1)));
  if (at == line.ids.end() || at->first != name) return false;
  if (!numbers(probs, line.n, line.probs)) return false;
  line.chosen.push_back(at->second);
  line.stop.push_back(c);
  line.round_y.push_back(score);
  return true;
}

bool walk(element doc, Line &line) {
  static constexpr std::string_view names[] = {"trajectory_id", "task_id", "budget", "pool", "rounds", "ranking"};
  element values[6];
  unsigned seen;
  if (!fields(doc, names, values, seen)) return false;
  auto [tid, task, budget, pool_value, rounds_value, ranking] = values;
  if ((seen & 31) != 31 || !text(tid, line.tid) || !text(task, line.task)) return false;
  if (budget.type() != element_type::INT64 || (line.budget = int64_t(budget)) < 1) return false;
  if (seen & 32) {
    std::string_view name;
    if (ranking.get_string().get(name) || (name != "original" && name != "pro" && name != "anti")) return false;
  }
  simdjson::dom::array rounds;
  if (rounds_value.get_array().get(rounds) || rounds.size() < 1 || int64_t(rounds.size()) > line.budget) return false;
  if (!pool(pool_value, line)) return false;
  for (element value : rounds)
    if (!round(value, line)) return false;
  return true;
}

// The numbers of the lines gathered by one call, in line order, handed over as one buffer per field.
struct Gathered {
  std::vector<double> budget, doc_y, doc_m, probs, stop, round_y;
  std::vector<int64_t> n_docs, n_rounds, chosen;

  void add(const Line &line) {
    budget.push_back(double(line.budget));
    n_docs.push_back(int64_t(line.n));
    n_rounds.push_back(int64_t(line.chosen.size()));
    doc_y.insert(doc_y.end(), line.doc_y.begin(), line.doc_y.end());
    doc_m.insert(doc_m.end(), line.doc_m.begin(), line.doc_m.end());
    probs.insert(probs.end(), line.probs.begin(), line.probs.end());
    chosen.insert(chosen.end(), line.chosen.begin(), line.chosen.end());
    stop.insert(stop.end(), line.stop.begin(), line.stop.end());
    round_y.insert(round_y.end(), line.round_y.begin(), line.round_y.end());
  }
};

template <typename T>
PyObject *buffer(const std::vector<T> &values) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char *>(values.data()), Py_ssize_t(values.size() * sizeof(T)));
}

// Append one object (a new reference, stolen) to a list; false with a Python error set on failure.
bool append(PyObject *list, PyObject *item) {
  if (item == nullptr) return false;
  int failed = PyList_Append(list, item);
  Py_DECREF(item);
  return failed == 0;
}

bool gather(PyObject *const *out, const Line &line, Py_ssize_t number) {
  return append(out[LINES], PyLong_FromSsize_t(number))
         && append(out[IDS], PyUnicode_DecodeUTF8(line.tid.data(), Py_ssize_t(line.tid.size()), "strict"))
         && append(out[TASKS], PyUnicode_DecodeUTF8(line.task.data(), Py_ssize_t(line.task.size()), "strict"));
}

thread_local simdjson::dom::parser parser;

// take_lines(text, start, number, out) -> (next start, lines taken, numbers), as take_lines below
PyObject *take_lines_unguarded(PyObject *args) {
  PyObject *bytes, *lists;
  Py_ssize_t start, number;
  if (!PyArg_ParseTuple(args, "SnnO!", &bytes, &start, &number, &PyTuple_Type, &lists)) return nullptr;
  if (PyTuple_GET_SIZE(lists) != N_OUT) {
    PyErr_SetString(PyExc_ValueError, "out must be a tuple of 3 lists");
    return nullptr;
  }
  PyObject *const *out = &PyTuple_GET_ITEM(lists, 0);
  for (int k = 0; k < N_OUT; k++)
    if (!PyList_Check(out[k])) {
      PyErr_SetString(PyExc_TypeError, "out must hold lists");
      return nullptr;
    }
  const char *data = PyBytes_AS_STRING(bytes);
  Py_ssize_t size = PyBytes_GET_SIZE(bytes), taken = 0;
  Line line;
  Gathered numbers;
  while (start >= 0 && start < size && data[start] == '{') {
    const char *nl = static_cast<const char *>(std::memchr(data + start, '\n', size_t(size - start)));
    Py_ssize_t end = nl ? nl - data + 1 : size;
    size_t length = size_t(end - start);
    if (std::memchr(data + start, '\\', length)) break;
    // The parse reads SIMDJSON_PADDING bytes past the line: in place when the range has them, else a copy.
    bool in_place = size_t(size - end) >= simdjson::SIMDJSON_PADDING;
    element doc;
    if (parser.parse(data + start, length, !in_place).get(doc)) break;
    line.clear();
    if (!walk(doc, line)) break;
    if (!gather(out, line, number + taken)) return nullptr;
    numbers.add(line);
    taken++;
    start = end;
  }
  return Py_BuildValue("(nn(NNNNNNNNN))", start, taken, buffer(numbers.budget), buffer(numbers.n_docs),
                       buffer(numbers.n_rounds), buffer(numbers.doc_y), buffer(numbers.doc_m), buffer(numbers.probs),
                       buffer(numbers.chosen), buffer(numbers.stop), buffer(numbers.round_y));
}

// A C++ exception must not cross into Python (it would end the process): an allocation that failed is a
// MemoryError. Every Python object made so far is owned by out's lists or freed with the line's locals.
PyObject *take_lines(PyObject *, PyObject *args) {
  try {
    return take_lines_unguarded(args);
  } catch (const std::bad_alloc &) {
    return PyErr_NoMemory();
  }
}

PyMethodDef methods[] = {
    {"take_lines", take_lines, METH_VARARGS,
     "take_lines(text, start, number, out) -> (start, taken, numbers): gather the lines of text from byte start "
     "(numbered from number) while they have the canonical shape, their line numbers, ids and task ids into "
     "the 3 lists of out, their values as 9 buffers (budget, n_docs, n_rounds, doc_y, doc_m, probs, chosen, stop, "
     "round_y; float64 or int64); stop at the first declined line, at the returned start."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_line_walk", "The compiled walk of draligned.cess.line_chunk.", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__line_walk() { return PyModule_Create(&module); }
