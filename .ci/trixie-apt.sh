# Sourced by the .ci/fetch-*.sh scripts: trixie_apt NAME SUITES COMPONENTS
# [empty] points a private apt at Debian 13 (SUITES and COMPONENTS,
# space-separated) without touching the machine's sources or lists: it
# checks the tools, makes the temporary folder $tmp (removed on exit) with
# $tmp/debs for downloads, fills the array opts with the options every
# apt-get / apt-cache call of the script takes, and updates the private
# lists. "empty" resolves dependencies as for an empty machine (an empty
# dpkg status), whatever this one has installed. NAME prefixes the errors.
trixie_apt() {
	local name=$1 suites=$2 components=$3 empty=${4:-}
	for c in apt-get apt-cache dpkg-deb; do
		command -v $c >/dev/null 2>&1 || { echo "$name: no $c" >&2; exit 1; }
	done
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	[[ -e $keyring ]] || { echo "$name: no $keyring" >&2; exit 1; }
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
	cat >"$tmp/trixie.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suites
Components: $components
Signed-By: $keyring
SRC
	opts=(-qq -o "Dir::Etc::sourcelist=$tmp/trixie.sources" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$tmp/lists"
		-o "Dir::Cache=$tmp/cache" -o APT::Architecture=amd64 -o APT::Architectures=amd64)
	[[ -n $empty ]] && opts+=(-o Dir::State::status=/dev/null)
	[[ $(id -u) -eq 0 ]] && opts+=(-o APT::Sandbox::User=root) # files in $tmp, not _apt's
	apt-get "${opts[@]}" update >/dev/null
}
