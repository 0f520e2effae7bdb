package api

// CellRequest is one cell to run in a session's kernel: a live interpreter
// that keeps its namespace (variables, imports, functions, loaded data)
// between calls, as a notebook does.
type CellRequest struct {
	// SessionID is the session whose kernel runs the cell (required).
	SessionID string
	// Language names the kernel's language ("": the session's language if
	// it has a kernel, else python).
	Language string
	// Code is the cell.
	Code []byte
	// Limits: TimeoutMS and CPUTimeMS bound this cell (defaults: the
	// server's run limits); MemoryMB and Pids apply to a kernel this call
	// starts (a live kernel keeps those it started with); OutputBytes
	// caps each stream of the cell.
	Limits Limits
	// Restart kills the session's kernel of the language first: the cell
	// runs in a new one.
	Restart bool
	// Output, if set, receives the cell's output while it runs (as
	// Request.Output).
	Output func(stream, text string)
}

// CellResult is what one cell did. Its status is that of a run: ok, error
// (the cell raised: Error says what), timeout, memory_limit,
// output_limit, cancelled, internal_error; Kernel says what became of the
// kernel and its state.
type CellResult struct {
	Status  Status `json:"status" jsonschema:"ok, error (the cell raised an exception), timeout, memory_limit, output_limit, cancelled or internal_error"`
	Message string `json:"message,omitempty" jsonschema:"what happened, for any status but ok: which limit, and whether the kernel kept its state"`
	// Stdout and Stderr are the cell's output, cleaned as a run's. Past
	// the text cap they hold the head and the tail, and the output is
	// saved in the session (StdoutFile, StderrFile) as far as it was
	// captured (up to the output limit).
	Stdout          string `json:"stdout" jsonschema:"the cell's standard output (cleaned; past the text cap its head and tail)"`
	Stderr          string `json:"stderr" jsonschema:"the cell's standard error (cleaned; past the text cap its head and tail)"`
	StdoutTruncated bool   `json:"stdout_truncated" jsonschema:"stdout passed the output limit (the cell was interrupted then)"`
	StderrTruncated bool   `json:"stderr_truncated" jsonschema:"stderr passed the output limit (the cell was interrupted then)"`
	StdoutFile      string `json:"stdout_file,omitempty" jsonschema:"the session file holding the whole stdout (up to the output limit: see stdout_truncated), when it was longer than the text cap"`
	StderrFile      string `json:"stderr_file,omitempty" jsonschema:"the session file holding the whole stderr (up to the output limit: see stderr_truncated), when it was longer than the text cap"`
	// Value is the text of the cell's trailing expression (its repr; a
	// data frame as a table), as a notebook shows it.
	Value     string `json:"value,omitempty" jsonschema:"the value of the cell's last expression, as text (a data frame as a table)"`
	ValueType string `json:"value_type,omitempty" jsonschema:"the type of that value"`
	ValueFile string `json:"value_file,omitempty" jsonschema:"the session file holding the whole value text, when it was longer than the text cap"`
	// Error is the exception the cell raised.
	Error *CellError `json:"error,omitempty" jsonschema:"the exception the cell raised"`
	// Display are the images (figures, display(...)) and texts the cell
	// displayed, in order.
	Display []Display `json:"display,omitempty" jsonschema:"what the cell displayed: images (matplotlib figures, display(...)) and texts, in order"`

	ExecutionTimeMS int64 `json:"execution_time_ms" jsonschema:"wall-clock time of the cell in milliseconds"`
	CPUTimeMS       int64 `json:"cpu_time_ms" jsonschema:"CPU time of the kernel during the cell in milliseconds"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes" jsonschema:"the kernel's peak memory since it started, in bytes"`

	Kernel    KernelInfo   `json:"kernel" jsonschema:"the kernel that ran the cell and what became of it"`
	SessionID string       `json:"session_id" jsonschema:"the session"`
	Files     []FileChange `json:"files,omitempty" jsonschema:"files of the session's /work that the cell created, changed or deleted"`
	// FilesSummary counts every change when Files lists only the first
	// (as Result.FilesSummary).
	FilesSummary *FileSummary `json:"files_summary,omitempty" jsonschema:"set when files lists only the first changes: the counts of all of them"`
	// Notes are limit adjustments (as Result.Notes).
	Notes []string `json:"-"`
}

// CellError is an exception a cell raised.
type CellError struct {
	Type      string `json:"type" jsonschema:"the exception's type, e.g. ZeroDivisionError"`
	Message   string `json:"message" jsonschema:"the exception's message"`
	Traceback string `json:"traceback" jsonschema:"the traceback, as the interpreter prints it"`
}

// Display is one thing a cell displayed.
type Display struct {
	Kind string `json:"kind" jsonschema:"image or text"`
	// Path is an image's file in the session's /work; URI its resource.
	Path     string `json:"path,omitempty" jsonschema:"the image's file, relative to /work"`
	URI      string `json:"uri,omitempty" jsonschema:"the image's resource URI"`
	MIMEType string `json:"mime_type,omitempty" jsonschema:"the image's media type"`
	Width    int    `json:"width,omitempty" jsonschema:"the image's width in pixels"`
	Height   int    `json:"height,omitempty" jsonschema:"the image's height in pixels"`
	Bytes    int64  `json:"bytes,omitempty" jsonschema:"the image's size in bytes"`
	// Inline says the image is in the result as image content; Note why
	// not (past the image budget: as a resource link only).
	Inline bool   `json:"inline,omitempty" jsonschema:"the image is in the result as image content"`
	Note   string `json:"note,omitempty" jsonschema:"how the image was fitted to the image budget, or why it is a resource link only"`
	Text   string `json:"text,omitempty" jsonschema:"a displayed text"`
	// Data is an inline image's bytes (not in the JSON: the MCP layer
	// makes it image content).
	Data []byte `json:"-"`
}

// KernelInfo says which kernel ran a cell and what became of its state.
type KernelInfo struct {
	Language string `json:"language" jsonschema:"the kernel's language"`
	Version  string `json:"version,omitempty" jsonschema:"the interpreter's version"`
	// New: this call started the kernel (its namespace was empty before
	// the cell); Previous says why the session's earlier kernel of the
	// language is gone, if it had one.
	New      bool   `json:"new" jsonschema:"this call started a new kernel: nothing defined by earlier calls exists in it"`
	Previous string `json:"previous,omitempty" jsonschema:"why the session's previous kernel of this language ended (its state was lost then)"`
	// Alive: the kernel lives on after the cell, with its state;
	// otherwise it died or was killed and the next call starts a new one.
	Alive          bool `json:"alive" jsonschema:"the kernel lives on with its state; false: it is gone and the next call starts a new one"`
	ExecutionCount int  `json:"execution_count" jsonschema:"the cells this kernel has run, this one included"`
}
