package tiffio

import "fmt"

// kindError is a sentinel error that may itself belong to a broader kind.
type kindError struct {
	msg    string
	parent error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.parent }

var (
	// ErrFormat marks files that are not valid TIFF.
	ErrFormat error = &kindError{msg: "invalid format"}
	// ErrTruncated marks files that end before data they reference; it is
	// also an ErrFormat.
	ErrTruncated error = &kindError{msg: "truncated", parent: ErrFormat}
	// ErrNotRegular marks a path that is not a regular file (a FIFO, device,
	// socket or directory); it is refused before it is opened for reading,
	// and is also an ErrFormat.
	ErrNotRegular error = &kindError{msg: "cannot read", parent: ErrFormat}
	// ErrUnsupported marks valid TIFF using a feature or pixel type this
	// package does not handle.
	ErrUnsupported error = &kindError{msg: "unsupported"}
)

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
}

func truncErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrTruncated}, args...)...)
}

func unsupErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}
