module github.com/parallax-engine/parallax

go 1.26

require (
	github.com/spf13/pflag v1.1.0
	github.com/x448/float16 v0.8.4
)
