#!/usr/bin/env bash
# Builds the agent's and the server's OCI images without a Docker daemon (buildah), from
# scratch: each holds its binary (debug sections stripped; .eh_frame kept), the shared libraries
# ldd lists for it, the CA bundle, and a passwd/group naming root and the server's user 65532 —
# nothing else (no shell, no package manager). The images go into the local containers storage
# (podman runs them as localhost/bimodal-agent:TAG) and, as OCI archives, into target/images/
# for `skopeo copy` or `podman push` to a registry. Prints each image's size.
# Usage: tools/images.sh [TAG]   (default: dev; make images). IMAGE_PROFILE: the cargo profile
# of the binaries (default release; `make test` gives ci, the build its tests ran).
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-${IMAGE_TAG:-dev}}
OUT=target/images
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
mkdir -p "$OUT"
PROFILE=${IMAGE_PROFILE:-release}
cargo build --profile "$PROFILE" --quiet -p bimodal-agent -p bimodal-server --bins
# cargo's `dev` profile builds into target/debug
BIN=target/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

image() { # image NAME USER PORT ARGS...
	local name=$1 user=$2 port=$3
	shift 3
	local binary=$BIN/$name root=$stage/$name
	mkdir -p "$root/usr/bin" "$root/etc/ssl/certs" "$root/tmp"
	objcopy --strip-debug "$binary" "$root/usr/bin/$name"
	# The dynamic loader and every library the binary links, at the paths it looks for them.
	ldd "$binary" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
	cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
	printf 'root:x:0:0:root:/:/sbin/nologin\nbimodal:x:65532:65532:bimodal:/:/sbin/nologin\n' >"$root/etc/passwd"
	printf 'root:x:0:\nbimodal:x:65532:\n' >"$root/etc/group"
	chmod 1777 "$root/tmp"

	local ctr
	ctr=$(buildah from scratch)
	buildah copy --quiet "$ctr" "$root" / >/dev/null
	buildah config \
		--entrypoint "[\"/usr/bin/$name\"]" "$@" \
		--user "$user" --workingdir / \
		--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
		${port:+--port "$port"} \
		--label org.opencontainers.image.title="$name" \
		--label org.opencontainers.image.version="$VERSION" \
		--label org.opencontainers.image.source=https://github.com/bimodal/bimodal \
		--label org.opencontainers.image.licenses=Apache-2.0 \
		"$ctr"
	buildah commit --quiet --format oci --rm "$ctr" "localhost/$name:$TAG" >/dev/null
	rm -f "$OUT/$name.tar"
	buildah push --quiet "localhost/$name:$TAG" "oci-archive:$OUT/$name.tar:$name:$TAG"
	local size
	size=$(podman image inspect --format '{{.Size}}' "localhost/$name:$TAG")
	printf 'images: localhost/%s:%s  %d MiB unpacked, %d MiB as %s\n' "$name" "$TAG" \
		$((size >> 20)) $(($(stat -c %s "$OUT/$name.tar") >> 20)) "$OUT/$name.tar"
}

# The agent runs as root with only the capabilities its DaemonSet adds (deploy/helm/bimodal).
image bimodal-agent 0 "" --cmd '["run"]'
image bimodal-server 65532:65532 7070
