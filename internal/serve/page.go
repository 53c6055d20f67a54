package serve

import (
	_ "embed"
	"net/http"
)

// chatPage is the chat web page served at /: one HTML file with its script
// and style inline, no external assets. It streams answers from
// /v1/chat/completions.
//
//go:embed static/index.html
var chatPage []byte

// page serves the chat page at / and a JSON 404 elsewhere.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: "no such endpoint: " + r.URL.Path})
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Message: r.Method + " / is not allowed; use GET"})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write(chatPage)
}
