# The azlease command as a container image: the static binary from
# 'make build' on an empty base, with no shell and no package manager, run as
# a user that is not root. Build it with
#
#	make image                       # this machine's architecture: azlease:dev
#	podman build --platform linux/arm64 -t azlease:arm64 .   # after make build
#
# TARGETARCH (amd64, arm64) comes from --platform and picks the binary.
# Nothing is fetched: FROM scratch needs no registry.
FROM scratch
ARG TARGETARCH
# Root certificates for https to Azure (Go reads this path on Linux): the
# build machine's bundle, which 'make build' copies into dist/.
COPY dist/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY dist/azlease-linux-${TARGETARCH} /azlease
# A numeric user and group (there is no /etc/passwd): 65532 is "nonroot" in
# distroless images. azlease writes no files.
USER 65532:65532
ENTRYPOINT ["/azlease"]
