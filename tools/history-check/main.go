// Command history-check is quorate's second, independent linearizability checker. It reads a
// client history (JSON lines, docs/reference/history-format.md), checks it with porcupine
// against a key-value model partitioned by key, and separately checks that the revisions of
// acknowledged writes are unique and increase in real-time order. It prints one verdict line
// and exits 0 (linearizable), 1 (not linearizable), 2 (unreadable input) or 3 (undecided
// within --timeout). With --html it writes porcupine's visualisation of a failing history.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Line is one line of a history file; see docs/reference/history-format.md.
type Line struct {
	Type                string  `json:"type"`
	Client              int     `json:"client"`
	CallNs              int64   `json:"call_ns"`
	ReturnNs            int64   `json:"return_ns"`
	Op                  string  `json:"op"`
	Key                 string  `json:"key"`
	Value               *string `json:"value"`
	ExpectedModRevision *int64  `json:"expected_mod_revision"`
	Serializable        bool    `json:"serializable"`
	Outcome             string  `json:"outcome"`
	Error               string  `json:"error"`
	Revision            *int64  `json:"revision"`
	Succeeded           *bool   `json:"succeeded"`
	Deleted             *int64  `json:"deleted"`
	Found               *bool   `json:"found"`
	FoundValue          *string `json:"found_value"`
	ModRevision         *int64  `json:"mod_revision"`
	Version             *int64  `json:"version"`
	// number is the line's 1-based position in the file (not part of the format).
	number int
}

// Input is what a client asked, as the model sees it.
type Input struct {
	Op       string
	Key      string
	Value    string
	Expected int64
	Line     int
}

// Output is what etcd answered; Unknown when it did not.
type Output struct {
	Unknown     bool
	Revision    int64
	Succeeded   bool
	Deleted     int64
	Found       bool
	FoundValue  string
	ModRevision int64
	Version     int64 // 0: not recorded
}

// State is one key's state. ModRevision 0 with Exists means "not known yet": an unknown write
// may have set it; the next answer that shows it fixes it.
type State struct {
	Exists      bool
	Value       string
	ModRevision int64
	Version     int64
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func num(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// ReadHistory parses a history file. Watch lines are not operations: when the file has any,
// an unknown put or compare-and-swap whose unique value the watch never delivered did not take
// effect and is left out, as etcd's robustness tests patch their histories with a watch
// (keeping every unknown write pending to the end is correct but leaves the search hundreds of
// operations that may happen at any later point).
func ReadHistory(r io.Reader) ([]Line, error) {
	var lines []Line
	watched := map[string]bool{}
	sawWatch := false
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for scanner.Scan() {
		n++
		text := scanner.Bytes()
		if len(text) == 0 {
			continue
		}
		var l Line
		if err := json.Unmarshal(text, &l); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		l.number = n
		if l.Type == "watch" {
			sawWatch = true
			if l.Value != nil {
				watched[l.Key+"\x00"+*l.Value] = true
			}
			continue
		}
		if l.Type == "lease" {
			// Lease operations: expiry deletes keys at a time no client chooses, which this
			// key-value model cannot express; quorate-chaos checks them apart, on keys outside
			// the ones the op lines use (docs/reference/history-format.md).
			continue
		}
		if l.Type != "op" {
			return nil, fmt.Errorf("line %d: type %q is neither \"op\", \"watch\" nor \"lease\"", n, l.Type)
		}
		if err := validate(&l); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		lines = append(lines, l)
	}
	if err := scanner.Err(); err != nil || !sawWatch {
		return lines, err
	}
	kept := lines[:0]
	for _, l := range lines {
		unseen := l.Outcome == "unknown" && (l.Op == "put" || l.Op == "compare_and_swap") &&
			!watched[l.Key+"\x00"+str(l.Value)]
		if !unseen {
			kept = append(kept, l)
		}
	}
	return kept, nil
}

func validate(l *Line) error {
	switch l.Op {
	case "get", "delete":
	case "put":
		if l.Value == nil {
			return errors.New("put without value")
		}
	case "compare_and_swap":
		if l.Value == nil || l.ExpectedModRevision == nil {
			return errors.New("compare_and_swap without value or expected_mod_revision")
		}
	default:
		return fmt.Errorf("unknown op %q", l.Op)
	}
	switch l.Outcome {
	case "unknown":
	case "ok":
		if l.Revision == nil {
			return errors.New("answered operation without revision")
		}
		if l.Op == "compare_and_swap" && l.Succeeded == nil {
			return errors.New("answered compare_and_swap without succeeded")
		}
		if l.Op == "delete" && l.Deleted == nil {
			return errors.New("answered delete without deleted")
		}
	default:
		return fmt.Errorf("unknown outcome %q", l.Outcome)
	}
	if l.ReturnNs < l.CallNs {
		return errors.New("returns before it is called")
	}
	return nil
}

// Operations turns the lines porcupine judges into porcupine operations: serializable gets are
// left out (one member's view may be stale by design); an unknown outcome returns at
// math.MaxInt64, as etcd's robustness tests record failed writes (it may have taken effect at
// any time after its call, or never).
func Operations(lines []Line) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, l := range lines {
		if l.Op == "get" && (l.Serializable || l.Outcome == "unknown") {
			continue
		}
		in := Input{Op: l.Op, Key: l.Key, Value: str(l.Value), Expected: num(l.ExpectedModRevision), Line: l.number}
		out := Output{Unknown: l.Outcome == "unknown"}
		ret := l.ReturnNs
		if out.Unknown {
			ret = math.MaxInt64
		} else {
			out.Revision = num(l.Revision)
			out.Succeeded = l.Succeeded != nil && *l.Succeeded
			out.Deleted = num(l.Deleted)
			out.Found = l.Found != nil && *l.Found
			out.FoundValue = str(l.FoundValue)
			out.ModRevision = num(l.ModRevision)
			out.Version = num(l.Version)
		}
		ops = append(ops, porcupine.Operation{ClientId: l.Client, Input: in, Call: l.CallNs, Output: out, Return: ret})
	}
	return ops
}

// read checks what a get (or a failed compare's else branch) saw against s, and returns s
// with a not-yet-known mod revision learnt.
func read(s State, out Output) (bool, State) {
	if out.Found != s.Exists {
		return false, s
	}
	if !s.Exists {
		return true, s
	}
	if out.FoundValue != s.Value || out.ModRevision <= 0 {
		return false, s
	}
	if out.Version != 0 && out.Version != s.Version {
		return false, s
	}
	if s.ModRevision != 0 && s.ModRevision != out.ModRevision {
		return false, s
	}
	s.ModRevision = out.ModRevision
	return true, s
}

func written(s State, value string, revision int64) State {
	return State{Exists: true, Value: value, ModRevision: revision, Version: s.Version + 1}
}

// Step is the model of one key: every state the key can be in after the operation, none when
// the answer is impossible from s.
func Step(state, input, output interface{}) []interface{} {
	s, in, out := state.(State), input.(Input), output.(Output)
	switch in.Op {
	case "get":
		if ok, next := read(s, out); ok {
			return []interface{}{next}
		}
	case "put":
		if out.Unknown {
			return []interface{}{written(s, in.Value, 0)}
		}
		if out.Revision > s.ModRevision {
			return []interface{}{written(s, in.Value, out.Revision)}
		}
	case "delete":
		if out.Unknown || (out.Deleted == 1) == s.Exists && (!s.Exists || out.Revision > s.ModRevision) {
			return []interface{}{State{}}
		}
	case "compare_and_swap":
		holds := func() (bool, bool) { // (holds, decided)
			if !s.Exists {
				return in.Expected == 0, true
			}
			if s.ModRevision == 0 {
				return false, false
			}
			return in.Expected == s.ModRevision, true
		}
		h, decided := holds()
		if out.Unknown {
			if !decided {
				return []interface{}{written(s, in.Value, 0), s}
			}
			if h {
				return []interface{}{written(s, in.Value, 0)}
			}
			return []interface{}{s}
		}
		if out.Succeeded {
			if decided && !h || !decided && in.Expected <= 0 || out.Revision <= in.Expected {
				return nil
			}
			return []interface{}{written(s, in.Value, out.Revision)}
		}
		ok, next := read(s, out)
		if !ok {
			return nil
		}
		if (!next.Exists && in.Expected == 0) || (next.Exists && next.ModRevision == in.Expected) {
			return nil // the compare held, yet etcd said it failed
		}
		return []interface{}{next}
	}
	return nil
}

// Model is the key-value model, partitioned by key.
func Model() porcupine.Model {
	nm := &porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Input.(Input).Key
				if _, seen := byKey[k]; !seen {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			sort.Strings(keys)
			var parts [][]porcupine.Operation
			for _, k := range keys {
				parts = append(parts, byKey[k])
			}
			return parts
		},
		Init: func() []interface{} { return []interface{}{State{}} },
		Step: Step,
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(Input), output.(Output)
			var req string
			switch in.Op {
			case "get", "delete":
				req = fmt.Sprintf("%s(%q)", in.Op, in.Key)
			case "put":
				req = fmt.Sprintf("put(%q, %q)", in.Key, in.Value)
			default:
				req = fmt.Sprintf("cas(%q, mod=%d, %q)", in.Key, in.Expected, in.Value)
			}
			switch {
			case out.Unknown:
				return fmt.Sprintf("%s -> unknown [line %d]", req, in.Line)
			case in.Op == "get" || in.Op == "compare_and_swap" && !out.Succeeded:
				if !out.Found {
					return fmt.Sprintf("%s -> none @%d [line %d]", req, out.Revision, in.Line)
				}
				return fmt.Sprintf("%s -> %q mod=%d @%d [line %d]", req, out.FoundValue, out.ModRevision, out.Revision, in.Line)
			case in.Op == "delete":
				return fmt.Sprintf("%s -> deleted=%d @%d [line %d]", req, out.Deleted, out.Revision, in.Line)
			default:
				return fmt.Sprintf("%s -> ok @%d [line %d]", req, out.Revision, in.Line)
			}
		},
		DescribeState: func(state interface{}) string {
			s := state.(State)
			if !s.Exists {
				return "none"
			}
			if s.ModRevision == 0 {
				return fmt.Sprintf("%q mod=? v%d", s.Value, s.Version)
			}
			return fmt.Sprintf("%q mod=%d v%d", s.Value, s.ModRevision, s.Version)
		},
	}
	return nm.ToModel()
}

// RevisionProblems checks, apart from the model, that the revisions acknowledged writes
// created are unique and increase in real-time order, and that no linearizable get called
// after a write returned answers from an older revision.
func RevisionProblems(lines []Line) []string {
	type write struct {
		rev      int64
		ret      int64
		line     int
		call     int64
		isWriter bool
	}
	var writes, all []write
	byRev := map[int64]int{}
	var problems []string
	for _, l := range lines {
		if l.Outcome != "ok" || l.Serializable {
			continue
		}
		created := l.Op == "put" || l.Op == "delete" && num(l.Deleted) == 1 ||
			l.Op == "compare_and_swap" && l.Succeeded != nil && *l.Succeeded
		w := write{rev: num(l.Revision), ret: l.ReturnNs, line: l.number, call: l.CallNs, isWriter: created}
		if created {
			if other, dup := byRev[w.rev]; dup {
				problems = append(problems, fmt.Sprintf("revision %d acknowledged to two writes (lines %d and %d)", w.rev, other, w.line))
			}
			byRev[w.rev] = w.line
			writes = append(writes, w)
		}
		all = append(all, w)
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].ret < writes[j].ret })
	// best[i]: the write with the highest revision among writes[0..=i] (by return time).
	best := make([]write, len(writes))
	for i, w := range writes {
		best[i] = w
		if i > 0 && best[i-1].rev > w.rev {
			best[i] = best[i-1]
		}
	}
	for _, op := range all {
		i := sort.Search(len(writes), func(i int) bool { return writes[i].ret >= op.call }) - 1
		if i < 0 {
			continue
		}
		b := best[i]
		if op.isWriter && op.rev <= b.rev {
			problems = append(problems, fmt.Sprintf("revision goes back: line %d's write got revision %d, after line %d's write had returned revision %d", op.line, op.rev, b.line, b.rev))
		} else if !op.isWriter && op.rev < b.rev {
			problems = append(problems, fmt.Sprintf("stale answer: line %d answered at revision %d, after line %d's write had returned revision %d", op.line, op.rev, b.line, b.rev))
		}
	}
	return problems
}

// Verdict is the outcome of both checks.
type Verdict struct {
	Porcupine porcupine.CheckResult
	Info      porcupine.LinearizationInfo
	Revisions []string
	Ops       int
}

// Check runs both checks on lines.
func Check(lines []Line, timeout time.Duration) Verdict {
	ops := Operations(lines)
	result, info := porcupine.CheckOperationsVerbose(Model(), ops, timeout)
	return Verdict{Porcupine: result, Info: info, Revisions: RevisionProblems(lines), Ops: len(ops)}
}

func main() {
	html := flag.String("html", "", "write porcupine's visualisation here when the history is not linearizable")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up (exit 3) after this long; 0: no limit")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: history-check [--html FILE] [--timeout 5m] HISTORY.jsonl")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Printf("unreadable: %v\n", err)
		os.Exit(2)
	}
	lines, err := ReadHistory(f)
	f.Close()
	if err != nil {
		fmt.Printf("unreadable: %s: %v (see docs/reference/history-format.md)\n", flag.Arg(0), err)
		os.Exit(2)
	}
	v := Check(lines, *timeout)
	summary := fmt.Sprintf("porcupine %s on %d operations; %d revision problems", v.Porcupine, v.Ops, len(v.Revisions))
	for _, p := range v.Revisions {
		fmt.Fprintln(os.Stderr, p)
	}
	switch {
	case v.Porcupine == porcupine.Illegal || len(v.Revisions) > 0:
		if *html != "" && v.Porcupine == porcupine.Illegal {
			if err := porcupine.VisualizePath(Model(), v.Info, *html); err != nil {
				fmt.Fprintf(os.Stderr, "cannot write %s: %v\n", *html, err)
			} else {
				summary += "; visualisation: " + *html
			}
		}
		if len(v.Revisions) > 0 {
			summary += "; first: " + v.Revisions[0]
		}
		fmt.Println("not linearizable: " + summary)
		os.Exit(1)
	case v.Porcupine == porcupine.Unknown:
		fmt.Println("undecided: " + summary)
		os.Exit(3)
	default:
		fmt.Println("linearizable: " + summary)
	}
}
