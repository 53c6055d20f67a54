//go:build ignore

// gen writes corpus/NAME.txt.gz for each NAME.txt in a source folder:
// gzip at best compression, with no time stamp, so that the output depends
// only on the text.
//
//	go run gen.go -src ../../shared/data/austen -out corpus
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	src := flag.String("src", "../../shared/data/austen", "folder of .txt files")
	out := flag.String("out", "corpus", "folder for the .txt.gz files")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.txt"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no .txt files in %s", src)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(out, "*.txt.gz"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
		if err != nil {
			return err
		}
		zw.Name = filepath.Base(f)
		if _, err := zw.Write(text); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		name := filepath.Join(out, strings.TrimSuffix(filepath.Base(f), ".txt")+".txt.gz")
		if err := os.WriteFile(name, b.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %d -> %d bytes\n", name, len(text), b.Len())
	}
	return nil
}
