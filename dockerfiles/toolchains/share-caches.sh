# Open the toolchain caches and dependency stores that setup filled (as root) to every user, so
# the agent and verifier users reuse them offline. Run in the same RUN as setup: only entries
# that lack the permissions are changed, so files of lower layers are not copied up.
for dir in /opt/selfbench-cache /usr/local/cargo /usr/local/rustup /opt/playwright; do
  if [ -d "$dir" ]; then
    find "$dir" ! -type l ! -perm -o=rw -exec chmod a+rwX {} +
  fi
done
