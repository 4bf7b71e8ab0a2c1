#!/usr/bin/perl
# The verifier's trusted helper, run by tests/test.sh as root (and once at image build time).
# Perl because it is the one interpreter every verifier image has: Debian's and Ubuntu's git
# depends on perl, and JSON::PP is part of its core. It never loads a module from the tree.
#
#   prepare-image TASK      build time: evidence hooks into every Python site directory, the
#                           module names that resolve outside /app, ownership of /app
#   apply-policy TASK       the agent's patch onto /app, then the patch policy on the applied
#                           tree (default deny: only source and data changes stay)
#   canaries TASK           after test.patch: the canaries (tests the reference solution must
#                           fail, tests/canaries.json) written among the held-out tests
#   canary-ready TASK       exit 0 when an exit-code canary run is due
#   canary-sealed TASK      exit 0 when it is due by a sealed census (known before any run)
#   lockdown TASK           after test.patch: the harness root-owned and read-only, the
#                           prepared tree recorded so each test run starts from it
#   canaries-lockdown TASK  canaries, then lockdown
#   reset TASK              between two test runs: back to the prepared tree
#   reset-run TASK (the run in SELFBENCH_RUN_NAME, _KIND, _COMMAND)
#                           reset, then run (a test run after the first)
#   run TASK                one test run (NAME, KIND, CMD in SELFBENCH_RUN_NAME, _KIND,
#                           _COMMAND): CMD as the verifier user, its evidence collected over
#                           the collector's signed channel, judged; NAME.log, evidence/NAME.json
#                           (KIND canary: the exit-code canary's run, which must fail)
#   collect TASK NAME KIND EXIT LOG
#                           a run judged again from the records its collector kept
#   grade TASK              the runs' evidence summarised in /logs/verifier/evidence.json
#   go-filter               `go test -json` on stdin: each event to the collector, its text to stdout
#   policy-check TASK DIR OUT
#                           the runner's hack gate: each DIR/*.patch through the policy, in an
#                           index of its own (the tree untouched); what it keeps, to OUT
#   judge FILE, classify TASK SHADOWED, parse RUNNER FILE TASK
#                           pure entry points for the runner's unit tests
#
# TASK is /tests/selfbench-task.json (rendered by the compiler). The census of the tests this
# task's verification saw is /tests/expected-tests.json; unsealed until the runner seals it.
use strict;
use warnings;
use Cwd qw(realpath);
use Fcntl qw(O_RDONLY O_NOFOLLOW O_NONBLOCK O_WRONLY O_CREAT O_TRUNC S_ISREG S_ISDIR S_ISLNK);
use Digest::SHA qw(hmac_sha256_hex sha256_hex);
use File::Basename qw(basename dirname);
use JSON::PP ();
use Time::HiRes ();
# Loaded where used (`require`): File::Find, IO::Select, IO::Socket::UNIX, POSIX, Socket and
# Storable. A test run starts this helper about ten times, and compiling those modules was about
# 20 of the 50 ms of CPU each start took (measured, perl -c, Debian bookworm).

my $APP = '/app';
my $STATE = '/opt/selfbench-verifier/state';
my $LOGS = '/logs/verifier';
my $WORK = '/opt/selfbench/work';
my $EVIDENCE_ROOT = '/var/lib/selfbench-evidence';
my $CENSUS = '/tests/expected-tests.json';
my $CANARIES = '/tests/canaries.json';
my $CANARY_STATE = '/opt/selfbench-verifier/state/canaries.json';
# The rule a passing canary breaks, as every report says it (runner.model.canaries.CANARY_RULE).
my $CANARY_RULE = 'a test the reference solution fails passed';
# The rule a kept canary that did not run (or ran and neither failed nor passed) breaks in the
# full fail-to-pass run: code that takes tests out of the run, or skips them, must not leave
# only the ones it can answer (runner.model.canaries.CANARY_SILENT_RULE). Never which test.
my $CANARY_SILENT_RULE = 'a test the reference solution fails did not run';
# Which defences judge (the runner's EvidenceChecks): both; the canaries alone ("canaries": the
# in-process checks off); the in-process checks alone ("in-process": no canary written). A test
# mode, to show what each catches by itself; Harbor never sets it.
my $CHECKS = $ENV{SELFBENCH_EVIDENCE_CHECKS} // 'all';
my $TRUSTED_MANIFESTS = '/opt/selfbench-trusted/manifests.txt';
my $HOOKS = '/opt/selfbench-verifier/hooks';
# The trusted bytecode cache of the image's Python modules (warm_pycache), read-only to the runs.
my $PYCACHE = '/opt/selfbench-pycache';
my $GO_OVERLAY = '/var/lib/selfbench-go';
my $MAX_EVIDENCE_BYTES = 64 * 1024 * 1024;
my $MAX_TESTS = 200_000;
my $JSON = JSON::PP->new->utf8->canonical->allow_nonref;

# ---- small helpers ----------------------------------------------------------------------------

sub say_line { print STDERR "selfbench: @_\n" }

sub fail { say_line(@_); exit 2 }

# read_file PATH [LIMIT]: a regular file's bytes, never through a link (undef when absent).
sub read_file {
    my ($path, $limit) = @_;
    $limit //= $MAX_EVIDENCE_BYTES;
    sysopen(my $fh, $path, O_RDONLY | O_NOFOLLOW) or return undef;
    my @st = stat($fh);
    return undef unless @st && S_ISREG($st[2]);
    my $data = '';
    while (length($data) < $limit) {
        my $got = sysread($fh, my $chunk, 1 << 20);
        last unless $got;
        $data .= $chunk;
    }
    close $fh;
    return length($data) > $limit ? substr($data, 0, $limit) : $data;
}

sub write_file {
    my ($path, $data) = @_;
    my $tmp = "$path.tmp$$";
    unlink $tmp;
    sysopen(my $fh, $tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644)
      or fail("cannot write $tmp: $!");
    print {$fh} $data;
    close $fh or fail("cannot write $tmp: $!");
    rename $tmp, $path or fail("cannot write $path: $!");
}

sub read_json_any {
    my ($path) = @_;
    my $raw = read_file($path);
    return defined $raw ? eval { $JSON->decode($raw) } : undef;
}

sub read_json { my $doc = read_json_any($_[0]); return ref($doc) eq 'HASH' ? $doc : undef }

sub write_json { write_file($_[0], JSON::PP->new->utf8->canonical->pretty->encode($_[1])) }

sub task { my $doc = read_json($_[0]); fail("cannot read $_[0]") unless $doc; return $doc }

# git ARGS...: git as root on /app, its configuration and hooks out of anyone's reach but
# root's (the global config of a writable $HOME, fsmonitor, hooks, filters never run).
# The objects the helper's own indexes hash (the agent's files, the held-out tests as the
# lockdown saw them) go to a store of root's alone, the repository's read through it: in
# /app/.git/objects, readable by the tests, an exit-code canary's original held-out file was
# there to compare with (an attack hashed the file it ran and found its blob: the canary run is
# the one whose file is not in the store).
my $OBJECTS = "$WORK/objects";

sub git_env {
    system('mkdir', '-p', '-m', '0700', $WORK, $OBJECTS) unless -d $OBJECTS;
    return (
        HOME => '/root', GIT_CONFIG_GLOBAL => '/dev/null', GIT_TERMINAL_PROMPT => '0',
        GIT_LITERAL_PATHSPECS => '1', GIT_OPTIONAL_LOCKS => '0', GIT_ASKPASS => '/bin/false',
        GIT_OBJECT_DIRECTORY => $OBJECTS, GIT_ALTERNATE_OBJECT_DIRECTORIES => "$APP/.git/objects",
    );
}

my @GIT = (
    'git', '-C', $APP, '-c', 'core.fsmonitor=false', '-c', 'core.hooksPath=/dev/null',
    '-c', 'core.untrackedCache=false', '-c', 'core.quotePath=false', '-c', 'diff.external=',
    '-c', 'core.sshCommand=false',
    # A file's size and mtime say whether it changed since the image's index was written: its
    # inode and ctime do not survive the image's layers (and the build's chown).
    '-c', 'core.checkStat=minimal', '-c', 'core.trustctime=false',
);

# start_index PATH [FROM]: an index to work in, started from FROM (the image's own index by
# default), so `git add --all` hashes only what changed since, not the whole tree.
sub start_index {
    my ($index, $from) = @_;
    $from //= "$APP/.git/index";
    unlink $index;
    if (-f $from && !-l $from) {
        system('cp', '--', $from, $index) == 0 or fail("cannot copy $from");
    }
}

# git_out INDEX ARGS...: stdout of git (INDEX: a GIT_INDEX_FILE or undef); dies on failure.
sub git_run {
    my ($index, $input, @args) = @_;
    local %ENV = (%ENV, git_env());
    delete @ENV{qw(GIT_DIR GIT_WORK_TREE GIT_EXTERNAL_DIFF GIT_SSH GIT_SSH_COMMAND PAGER)};
    if (defined $index) { $ENV{GIT_INDEX_FILE} = $index } else { delete $ENV{GIT_INDEX_FILE} }
    my $pid = open(my $out, '-|') // fail("cannot fork: $!");
    if ($pid == 0) {
        if (defined $input) {
            open(STDIN, '<', $input) or exit 127;
        } else {
            open(STDIN, '<', '/dev/null') or exit 127;
        }
        exec(@GIT, @args) or exit 127;
    }
    local $/;
    my $data = <$out> // '';
    close $out;
    return ($? >> 8, $data);
}

sub git_out {
    my ($index, @args) = @_;
    my ($code, $data) = git_run($index, undef, @args);
    fail("git @args failed (exit $code)") if $code != 0;
    return $data;
}

sub git_ok { my ($index, @args) = @_; my ($code) = git_run($index, undef, @args); return $code == 0 }

sub zsplit { my @parts = split /\0/, $_[0]; return @parts }

# ---- the patch policy ---------------------------------------------------------------------------
# Every path the agent's patch adds, changes, deletes or renames (both sides), from git's view of
# the applied tree, is classified. Only source and data changes stay; everything that
# configures, extends or replaces a tool is undone wherever it sits, whatever its extension.

# The vocabulary: every table of names and patterns the policy and the runners' rules read, from
# the one data file beside this helper (vocabulary.json; the runner's Python side reads the same
# file, runner/runners/vocabulary.py).
my $HELPER_DIR = dirname(realpath($0) // $0);
my $VOCABULARY = read_json("$HELPER_DIR/vocabulary.json")
  // fail('cannot read vocabulary.json beside the helper');
sub set_of { my ($list) = @_; return map { $_ => 1 } @{ $list // [] } }
sub patterns_of { my ($list) = @_; return map { qr/$_/ } @{ $list // [] } }
my ($EXT, $DIRS, $FILES) = @$VOCABULARY{qw(extensions directories files)};
my %SOURCE_EXT = set_of($EXT->{source});
my %DATA_EXT = set_of($EXT->{data});
my %BINARY_DATA_EXT = set_of($EXT->{binaryData});  # binary by nature (no NUL check)
my %COMPILED_EXT = set_of($EXT->{compiled});
my %PACKAGING_EXT = set_of($EXT->{packaging});
my %INSTALLED_DIRS = set_of($DIRS->{installed});
my %COMPILED_DIRS = set_of($DIRS->{compiled});
my @PACKAGING_DIRS = patterns_of($DIRS->{packaging});
my %TEST_DIRS = set_of($DIRS->{tests});
my %MANIFESTS = set_of($FILES->{manifests}{names});
my @MANIFEST_GLOBS = patterns_of($FILES->{manifests}{patterns});
my %CONFIGS = set_of($FILES->{configs}{names});
my @CONFIG_GLOBS = patterns_of($FILES->{configs}{patterns});
my %HOOKS = set_of($FILES->{hooks}{names});
my @HOOK_GLOBS = patterns_of($FILES->{hooks}{patterns});
my %TEST_NAMES = set_of($FILES->{tests}{names});
my @TEST_FILES = patterns_of($FILES->{tests}{patterns});
# The test runners the verifier knows, each as the vocabulary describes it: the shape of its
# selectors, what it prints when a selector selected nothing, whether its tests are read from
# its output, and what an image must have for its recorder.
my %RUNNERS = %{ $VOCABULARY->{runners} };

sub extension {
    my ($name) = @_;
    return $name =~ /\.([A-Za-z0-9+_-]+)$/ ? lc $1 : '';
}

sub glob_match {
    # A contract pattern, bash [[ == ]] style: `*` crosses `/`, `?` one character.
    my ($path, $pattern) = @_;
    my $re = join '', map {
        $_ eq '*' ? '.*' : $_ eq '?' ? '.' : quotemeta($_)
    } split /(\*|\?)/, $pattern;
    return $path =~ /\A$re\z/s;
}

sub under {
    my ($path, $dir) = @_;
    return $path eq $dir || index($path, "$dir/") == 0;
}

sub has_binary_content {
    my ($path) = @_;
    sysopen(my $fh, "$APP/$path", O_RDONLY | O_NOFOLLOW) or return 0;
    sysread($fh, my $head, 8000);
    close $fh;
    return defined $head && index($head, "\0") >= 0;
}

my %shadowed;
sub load_shadowed {
    return if %shadowed;
    my $raw = read_file("$STATE/python-shadowed.txt") // '';
    $shadowed{$_} = 1 for grep { length } split /\n/, $raw;
    $shadowed{'(loaded)'} = 1;
}

# python_module NAME-OF-FILE: the top-level import name a new file would define, if any.
sub python_top_level {
    my ($path) = @_;
    my $dir = dirname($path);
    my $name = basename($path);
    return ($1, $dir) if $name =~ /^([A-Za-z_][A-Za-z0-9_]*)\.py[iw]?$/ && $name ne '__init__.py';
    if ($name eq '__init__.py' && $dir ne '.') {
        my $package = basename($dir);
        return ($package, dirname($dir)) if $package =~ /^[A-Za-z_][A-Za-z0-9_]*$/;
    }
    return;
}

sub is_package_dir {
    my ($dir) = @_;
    return 0 if $dir eq '.' || $dir eq '';
    return -f "$APP/$dir/__init__.py";
}

# classify TASK PATH STATUS NEWMODE: (verdict, reason). verdict: keep | undo | held-out.
sub classify {
    my ($task, $path, $status, $new_mode, $by_name) = @_;
    my $name = basename($path);
    my @parts = split m{/}, $path;
    my @dirs = @parts[0 .. $#parts - 1];
    for my $held (@{ $task->{heldOut} }) {
        return ('held-out', 'a held-out test path') if under($path, $held);
    }
    for my $pattern (@{ $task->{harnessAllow} }) {
        return ('keep', 'allowed by the contract: harnessAllow') if glob_match($path, $pattern);
    }
    if ($status ne 'D') {
        return ('undo', 'a symbolic link') if $new_mode eq '120000';
        return ('undo', 'a submodule') if $new_mode eq '160000';
    }
    for my $named (@{ $task->{commandFiles} }) {
        return ('undo', 'run by the test command') if $path eq $named;
    }
    for my $named (@{ $task->{selectorFiles} }) {
        return ('undo', 'named by a test selector') if $path eq $named;
    }
    for my $pattern (@{ $task->{harnessProtect} }) {
        return ('undo', 'listed in the contract: harnessProtect') if glob_match($path, $pattern);
    }
    for my $dir (@dirs) {
        return ('undo', 'a compiled or binary artifact') if $COMPILED_DIRS{$dir};
        return ('undo', 'installed or vendored packages') if $INSTALLED_DIRS{$dir};
        return ('undo', 'packaging metadata or entry points') if grep { $dir =~ $_ } @PACKAGING_DIRS;
    }
    for my $part (@parts) {
        return ('undo', 'a dotfile or dot-directory, which configures tools') if $part =~ /^\./;
    }
    my $ext = extension($name);
    return ('undo', 'packaging metadata or entry points') if $PACKAGING_EXT{$ext};
    return ('undo', 'a compiled or binary artifact') if $COMPILED_EXT{$ext};
    return ('undo', 'a dependency manifest or lockfile')
      if $MANIFESTS{$name} || grep { $name =~ $_ } @MANIFEST_GLOBS;
    return ('undo', 'tool configuration') if $CONFIGS{$name} || grep { $name =~ $_ } @CONFIG_GLOBS;
    return ('undo', 'a test-runner hook') if $HOOKS{$name} || grep { $name =~ $_ } @HOOK_GLOBS;
    my $gold = $task->{goldSet}{$path};
    unless ($gold) {
        for my $dir (@dirs) {
            return ('undo', 'inside a test directory, where the held-out tests decide') if $TEST_DIRS{$dir};
        }
        return ('undo', 'a test file, where the held-out tests decide')
          if $TEST_NAMES{$name} || grep { $name =~ $_ } @TEST_FILES;
        if ($name eq '__init__.py' || $name eq '__init__.pyi') {
            my $dir = dirname($path);
            for my $test_dir (@{ $task->{testDirs} }) {
                return ('undo', 'a package initialiser beside the tests') if under($test_dir, $dir);
            }
        }
        if ($status eq 'A' && !$by_name) {
            my ($module, $parent) = python_top_level($path);
            if (defined $module && !is_package_dir($parent)) {
                load_shadowed();
                return ('undo', "shadows the module $module that resolves outside /app")
                  if $shadowed{$module};
            }
        }
    }
    if ($SOURCE_EXT{$ext} || $DATA_EXT{$ext}) {
        return ('undo', 'binary content in a text file')
          if $status ne 'D' && !$by_name && has_binary_content($path);
        return ('keep', $SOURCE_EXT{$ext} ? 'source' : 'data');
    }
    return ('keep', 'data') if $BINARY_DATA_EXT{$ext};
    return ('keep', 'changed by the reference solution too') if $gold;
    return ('undo', 'not recognised as source code or data');
}

sub remove_new {
    my ($path) = @_;
    my $full = "$APP/$path";
    unlink $full if -l $full || -e $full;
    my $dir = dirname($path);
    while ($dir ne '.' && $dir ne '') {
        last unless rmdir "$APP/$dir";  # only while empty
        $dir = dirname($dir);
    }
}

# trusted_or TRUSTED PATH MODE BLOB VERDICT REASON: the verdict, except that a manifest the patch
# leaves exactly as the dependency-setup pass installed from (the reference solution's version,
# byte for byte) is kept: undoing it would restore those same bytes, and the reference solution
# would be reported as graded without part of itself.
sub trusted_or {
    my ($trusted, $path, $mode, $blob, $verdict, $reason) = @_;
    my $version = $trusted->{$path};
    return ($verdict, $reason) if $verdict eq 'keep' || !$version;
    return ('keep', 'the version the dependency-setup pass installed from')
      if $version->[0] eq $mode && $version->[1] eq $blob;
    return ($verdict, $reason);
}

sub cmd_apply_policy {
    my ($task_path) = @_;
    my $task = task($task_path);
    $task->{goldSet} = { map { $_ => 1 } @{ $task->{goldFiles} } };
    my $patch = '/opt/selfbench/agent.patch';
    my $index = "$WORK/policy.index";
    system('mkdir', '-p', $WORK);
    chmod 0700, $WORK;
    start_index($index);
    # The tree as it stands (post-setup, before the patch): what every undo goes back to.
    git_out($index, 'add', '--all');
    my $before = git_out($index, 'write-tree');
    chomp $before;
    write_file("$WORK/before-tree", "$before\n");
    my @policy;
    if (-s $patch) {
        my ($code) = git_run($index, undef, 'apply', '--index', '--binary', '--whitespace=nowarn',
          $patch);
        if ($code != 0) {
            say_line('agent.patch does not apply');
            write_json("$LOGS/policy.json", { applied => JSON::PP::false, changes => [] });
            return 1;
        }
    }
    # git's view of the applied tree against the tree before it: every path, both sides of a
    # rename, whatever .gitignore says (the index took the patch's own paths).
    my $raw = git_out($index, 'diff-index', '--cached', '--raw', '--no-renames', '-z', $before);
    my @fields = zsplit($raw);
    my (@undo, %trusted);
    for my $line (split /\n/, read_file($TRUSTED_MANIFESTS) // '') {
        my ($blob, $mode, $path) = split /\t/, $line, 3;
        $trusted{$path} = [$mode, $blob] if defined $path;
    }
    while (@fields) {
        my $meta = shift @fields;
        my $path = shift @fields // last;
        my ($old_mode, $new_mode, undef, $new_blob, $status) = split / /, substr($meta, 1);
        $status = substr($status, 0, 1);
        my ($verdict, $reason) = trusted_or(\%trusted, $path, $new_mode, $new_blob,
          classify($task, $path, $status, $new_mode));
        push @policy, { path => $path, status => $status, verdict => $verdict, reason => $reason };
        push @undo, [$path, $status, $verdict] if $verdict ne 'keep';
    }
    my (@discarded, $restored_trusted);
    for my $item (@undo) {
        my ($path, $status, $verdict) = @$item;
        if ($trusted{$path}) {
            $restored_trusted++;
            # A manifest the reference solution changed: the verifier's dependencies come from
            # its dependency-setup pass, so the trusted version is the one that pass used.
            my ($mode, $blob) = @{ $trusted{$path} };
            git_out($index, 'update-index', '--add', '--cacheinfo', "$mode,$blob,$path");
            git_out($index, 'checkout-index', '--force', '--', $path);
        } elsif ($status eq 'A') {
            git_ok($index, 'rm', '--cached', '--quiet', '--', $path);
            remove_new($path);
        } else {
            git_out($index, 'checkout', $before, '--', $path);
        }
        push @discarded, $path;
    }
    my $kept = grep { $_->{verdict} eq 'keep' } @policy;
    # The agent's code as it stays in the tree: the evidence hooks watch what it does.
    write_file("$STATE/agent-files.txt", join('', map { "$APP/$_->{path}\n" }
      grep { $_->{verdict} eq 'keep' && $_->{status} ne 'D' } @policy));
    write_file("$LOGS/discarded.txt", join('', map { "$_\n" } @discarded));
    write_json("$LOGS/policy.json", { applied => JSON::PP::true, kept => $kept + 0,
      undone => scalar(@discarded), changes => \@policy });
    say_line(scalar(@discarded) . ' change(s) undone by the patch policy') if @discarded;
    # 3: nothing of the patch is left, and the tree is exactly the one nop tested.
    return $kept || $restored_trusted ? 0 : 3;
}

# policy-check TASK DIR OUT: the runner's hack gate, before any exploit's verifier runs. Each
# DIR/*.patch goes through the policy exactly as apply-policy would take it (the same apply, the
# same view of the applied tree, the same classification), in an index of its own: the work
# tree is not touched. OUT gets one JSON object per patch: whether it applies, how many of its
# changes the policy keeps, and whether an undo would restore a trusted manifest. A patch that
# applies with nothing kept and nothing restored leaves the tree nop tested.
sub cmd_policy_check {
    my ($task_path, $dir, $out) = @_;
    my $task = task($task_path);
    $task->{goldSet} = { map { $_ => 1 } @{ $task->{goldFiles} } };
    my $index = "$WORK/policy-check.index";
    system('mkdir', '-p', $WORK);
    chmod 0700, $WORK;
    start_index($index);
    git_out($index, 'add', '--all');
    my $before = git_out($index, 'write-tree');
    chomp $before;
    my %trusted;
    for my $line (split /\n/, read_file($TRUSTED_MANIFESTS) // '') {
        my ($blob, $mode, $path) = split /\t/, $line, 3;
        $trusted{$path} = [$mode, $blob] if defined $path;
    }
    opendir(my $dh, $dir) or fail("cannot read $dir");
    my @names = sort grep { /^[A-Za-z0-9._-]+\.patch$/ && -f "$dir/$_" && !-l "$dir/$_" } readdir $dh;
    closedir $dh;
    my %results;
    for my $file (@names) {
        (my $name = $file) =~ s/\.patch$//;
        git_out($index, 'read-tree', $before);
        my ($code) = git_run($index, undef, 'apply', '--cached', '--binary', '--whitespace=nowarn',
          "$dir/$file");
        if ($code != 0) {
            $results{$name} = { applied => JSON::PP::false, kept => 0, restores => 0, changes => [] };
            next;
        }
        my @fields = zsplit(git_out($index, 'diff-index', '--cached', '--raw', '--no-renames', '-z',
          $before));
        my (@changes, $kept, $restores);
        ($kept, $restores) = (0, 0);
        while (@fields) {
            my $meta = shift @fields;
            my $path = shift @fields // last;
            my (undef, $new_mode, undef, $new_blob, $status) = split / /, substr($meta, 1);
            $status = substr($status, 0, 1);
            my ($verdict, $reason) = trusted_or(\%trusted, $path, $new_mode, $new_blob,
              classify($task, $path, $status, $new_mode));
            push @changes, { path => $path, status => $status, verdict => $verdict, reason => $reason };
            if ($verdict eq 'keep') { $kept++ } elsif ($trusted{$path}) { $restores++ }
        }
        $results{$name} = { applied => JSON::PP::true, kept => $kept, restores => $restores,
          changes => \@changes };
    }
    unlink $index;
    write_json($out, \%results);
    return 0;
}

# ---- lockdown and reset -------------------------------------------------------------------------

sub tracked_harness {
    my ($task) = @_;
    my @found;
    my $raw = git_out(undef, 'ls-files', '-z');
    for my $path (zsplit($raw)) {
        next unless -f "$APP/$path" && !-l "$APP/$path";
        my ($verdict, $reason) = classify({ %$task, harnessAllow => [], goldSet => {} }, $path, 'M',
          '100644', 1);
        # Manifests and lockfiles stay writable: tools write them while they run (bun opens
        # package.json for writing; cargo refreshes Cargo.lock), and each run starts from the
        # prepared tree again anyway.
        next if $verdict eq 'keep' || $reason =~ /^(not recognised|a dependency manifest)/;
        push @found, $path;
    }
    return @found;
}

# protect_file PATH: root's and read-only. Left alone when it is already (the image build did
# it for the tracked harness): changing an image file's owner copies the whole file up.
sub protect_file {
    my ($full) = @_;
    my @st = lstat $full;
    return unless @st && S_ISREG($st[2]);
    my $mode = $st[2] & 07777;
    return if $st[4] == 0 && $st[5] == 0 && !($mode & 0222) && ($mode & 0444) == 0444;
    chown 0, 0, $full;
    chmod(($mode & ~0222) | 0444, $full);
}

# protect_dir PATH: root's and sticky, so the tests may create files there but never replace,
# rename or remove one of root's.
sub protect_dir {
    my ($full) = @_;
    my @st = lstat $full;
    return unless @st && S_ISDIR($st[2]);
    return if $st[4] == 0 && ($st[2] & 07777) == 01777;
    chown 0, 0, $full;
    chmod 01777, $full;
}

sub cmd_lockdown {
    my ($task_path) = @_;
    my $task = task($task_path);
    $task->{goldSet} = {};
    my %files = map { $_ => 1 } (tracked_harness($task), @{ $task->{commandFiles} },
      @{ $task->{selectorFiles} });
    for my $held (@{ $task->{heldOut} }) {
        my $full = "$APP/$held";
        next unless -e $full && !-l $full;
        if (-d $full) {
            require File::Find;
            File::Find::find({ no_chdir => 1, wanted => sub {
                return if -l $_;
                (my $rel = $_) =~ s{^\Q$APP\E/}{};
                $files{$rel} = 1 if -f $_;
            } }, $full);
        } else {
            $files{$held} = 1;
        }
    }
    my %dirs;
    for my $path (sort keys %files) {
        my $full = "$APP/$path";
        next if -l $full || !-f $full;
        protect_file($full);
        my $dir = dirname($path);
        while ($dir ne '.' && $dir ne '') { $dirs{$dir} = 1; $dir = dirname($dir) }
    }
    protect_dir($_ eq '.' ? $APP : "$APP/$_") for ('.', sort keys %dirs);
    # The prepared tree, for the reset before each later run: git's view of it (what restores a
    # tracked file) and the filesystem's, ignored files included (what was here before a run).
    my $index = "$WORK/prepared.index";
    start_index($index, "$WORK/policy.index");
    git_out($index, 'add', '--all');
    my $tree = git_out($index, 'write-tree');
    write_file("$WORK/prepared-tree", $tree);
    write_file("$WORK/protected", join('', map { "$_\n" } sort keys %files));
    my @held = grep { my $p = $_; grep { under($p, $_) } @{ $task->{heldOut} } } sort keys %files;
    write_file("$STATE/held-out-files.txt", join('', map { "$APP/$_\n" } @held));
    go_overlay($task);
    harden_interpreters();
    save_manifest(scan_tree());
    record_outside() if exit_code_canary();
    return 0;
}

# The shells and make that run a task's harness scripts: executable but not readable by the test
# user, so every process of them is not dumpable and its memory (/proc/PID/mem) is root's: a test
# process cannot write into the harness shell running it (exit-code runners have nothing else to
# judge by). Python processes make themselves not dumpable at start-up (the evidence boot).
sub harden_interpreters {
    my %done;
    for my $name (qw(bash sh dash make gmake)) {
        for my $dir (qw(/usr/local/bin /usr/bin /bin)) {
            my $real = realpath("$dir/$name") // next;
            next if $done{$real}++;
            my @st = lstat $real;
            next unless @st && S_ISREG($st[2]) && $st[4] == 0;
            chmod(($st[2] & 07777) & ~0044, $real);
        }
    }
}

# ---- go: the reporter inside each test binary ------------------------------------------------
# For every package of the workdir's module that has tests, a test file of the verifier's joins
# the package through `go test -overlay` (the go wrapper adds it while the verifier's tests run):
# its TestMain wraps each test so that the test's end is reported from inside the framework. A
# package with a TestMain of its own keeps it: that file is overlaid by a copy whose TestMain
# first calls the verifier's install. Root writes these files; the tests only read them.

sub go_overlay {
    my ($task) = @_;
    system('rm', '-rf', '--', $GO_OVERLAY);
    my $go = which('go') or return;
    my $wd = workdir_abs($task);
    my ($root) = go_module_of($wd);
    return unless defined $root;
    mkdir $GO_OVERLAY, 0755 or fail("cannot make $GO_OVERLAY: $!");
    my $template = read_file("$HOOKS/go/reporter_test.go.tmpl") // fail('no go reporter template');
    my (undef, $listed) = run_capture_in($root, { GOCACHE => "$GO_OVERLAY/cache", GOPROXY => 'off',
      GOFLAGS => $ENV{GOFLAGS} // '', HOME => '/root' },
      $go, 'list', '-e', '-f', "{{.ImportPath}}\t{{.Name}}\t{{.Dir}}\t{{len .TestGoFiles}}\t{{len .XTestGoFiles}}", './...');
    system('rm', '-rf', '--', "$GO_OVERLAY/cache");
    my ($version) = (run_capture_in($root, { HOME => '/root' }, $go, 'env', 'GOVERSION'))[1] =~ /(\S+)/;
    $version = 'unknown' unless defined $version && $version =~ /^[\w.+-]+$/;
    my (%replace, @packages);
    my $n = 0;
    for my $line (split /\n/, $listed // '') {
        my ($path, $name, $dir, $tests, $xtests) = split /\t/, $line;
        next unless defined $xtests && ($tests || $xtests) && $name =~ /^\w+$/;
        next unless index("$dir/", "$APP/") == 0 && -d $dir && !-l $dir;
        my ($main_file, $main_package);
        opendir(my $dh, $dir) or next;
        for my $file (sort grep { /_test\.go$/ && -f "$dir/$_" && !-l "$dir/$_" } readdir $dh) {
            my $text = read_file("$dir/$file", 8 << 20) // next;
            next unless $text =~ /^func\s+TestMain\s*\(\s*(\w+)\s+\*\s*\w+\.M\s*\)\s*\{/m;
            my $param = $1;
            my ($clause) = $text =~ /^package\s+(\w+)/m;
            ($main_file, $main_package) = ($file, $clause // $name);
            my $at = $+[0];
            write_file("$GO_OVERLAY/" . ++$n . '.go',
              substr($text, 0, $at) . " selfbenchZ9Install($param);" . substr($text, $at));
            $replace{"$dir/$file"} = "$GO_OVERLAY/$n.go";
            last;
        }
        closedir $dh;
        my $quoted = $JSON->encode($path);
        my $testmain = defined $main_file ? '' : "func TestMain(m *testing.M) {\n\tselfbenchZ9Install(m)\n"
          . "\tcode := m.Run()\n\tselfbenchZ9Send(\"t\", \"finish\", \"status\", strconv.Itoa(code))\n"
          . "\tos.Exit(code)\n}\n";
        my $package = $main_package // $name;
        (my $source = $template) =~ s/SELFBENCH_PACKAGE/$package/;
        $source =~ s/SELFBENCH_TESTMAIN/$testmain/;
        $source =~ s/SELFBENCH_IMPORT_PATH/$quoted/g;
        $source =~ s/SELFBENCH_VERSION/$version/;
        write_file("$GO_OVERLAY/" . ++$n . '.go', $source);
        $replace{"$dir/zz_selfbench_reporter_test.go"} = "$GO_OVERLAY/$n.go";
        push @packages, $path;
    }
    write_json("$GO_OVERLAY/overlay.json", { Replace => \%replace });
    write_file("$GO_OVERLAY/packages.txt", join('', map { "$_\n" } @packages));
    system('chmod', '-R', 'a+rX', $GO_OVERLAY);
}

# ---- the prepared tree, as the filesystem has it -----------------------------------------------
# What a run may be judged against ("was this file here before the run, unchanged?") is read from
# the filesystem, ignored directories included: an in-repo virtualenv or node_modules is part of
# the prepared tree although git never lists it. Each entry: path (relative to /app) => its
# identity (inode, size, mode, owner, change and modification times): a file the tests replaced or
# rewrote differs in one of them, whatever it holds.

my $MANIFEST = "$WORK/prepared.manifest";

sub identity_of { return join(':', @_[1, 7, 2, 4, 9, 10]) }  # an lstat list's identity

sub identity {
    my @st = Time::HiRes::lstat($_[0]);
    return @st ? identity_of(@st) : undef;
}

# writable_by_verifier STAT: whether the verifier user can change the entry (or, for a directory,
# add entries to it): it owns it (an owner may change the mode), or a group/other write bit.
my @VERIFIER;
sub writable_by_verifier {
    my ($mode, $uid, $gid) = @_;
    @VERIFIER = (getpwnam('verifier'))[2, 3] unless @VERIFIER;
    return 0 unless defined $VERIFIER[0];
    return 1 if $uid == $VERIFIER[0];
    return 1 if $mode & 0002;
    return 1 if ($mode & 0020) && $gid == $VERIFIER[1];
    return 0;
}

# scan_tree [PRUNE]: { entries => {path => identity}, open => {dir => 1} } of /app without .git.
# `open`: the directories a run can add entries to, and their ancestors (a reset walks only those).
# PRUNE (a set of directories a reset need not walk) skips the rest of the tree.
sub scan_tree {
    my ($walk) = @_;
    my (%entries, %open);
    require File::Find;
    File::Find::find({ no_chdir => 1, preprocess => sub { sort @_ }, wanted => sub {
        my $full = $File::Find::name;
        return if $full eq $APP;
        my $rel = substr($full, length($APP) + 1);
        if ($rel eq '.git') { $File::Find::prune = 1; return }
        my @st = Time::HiRes::lstat($full);
        return unless @st;
        $entries{$rel} = identity_of(@st);
        if (S_ISDIR($st[2])) {
            if ($walk && !$walk->{$rel}) { $File::Find::prune = 1; return }
            if (writable_by_verifier(@st[2, 4, 5])) {
                my $dir = $rel;
                while ($dir ne '.' && !$open{$dir}) { $open{$dir} = 1; $dir = dirname($dir) }
            }
        } elsif (writable_by_verifier(@st[2, 4, 5])) {
            my $dir = dirname($rel);
            while ($dir ne '.' && !$open{$dir}) { $open{$dir} = 1; $dir = dirname($dir) }
        }
    } }, $APP);
    return { entries => \%entries, open => \%open };
}

sub save_manifest { require Storable; Storable::nstore($_[0], "$MANIFEST.tmp$$"); rename "$MANIFEST.tmp$$", $MANIFEST }

my $manifest_cache;
sub load_manifest {
    return $manifest_cache if $manifest_cache;
    return undef unless -f $MANIFEST && !-l $MANIFEST;
    $manifest_cache = eval { require Storable; Storable::retrieve($MANIFEST) };
    return $manifest_cache;
}

# unchanged_since_prepared ABSPATH: the file under /app was in the prepared tree of this run and
# is still the same file (never replaced, rewritten or re-moded since).
sub unchanged_since_prepared {
    my ($abs) = @_;
    my $manifest = load_manifest() or return 0;
    return 0 unless index($abs, "$APP/") == 0;
    my $rel = substr($abs, length($APP) + 1);
    my $was = $manifest->{entries}{$rel} // return 0;
    my $now = identity($abs) // return 0;
    return $was eq $now;
}

# out_of_reach ABSPATH: a file outside /app that no test process could have written: it and every
# directory above it belong to root and are not writable by the verifier user.
sub out_of_reach {
    my ($abs) = @_;
    return 0 unless $abs =~ m{^/} && $abs !~ m{(^|/)\.\.?(/|$)};
    my $path = $abs;
    while (1) {
        my @st = lstat $path;
        return 0 unless @st;
        return 0 if S_ISLNK($st[2]) || $st[4] != 0 || writable_by_verifier(@st[2, 4, 5]);
        last if $path eq '/';
        $path = dirname($path);
    }
    return 1;
}

# ---- what a run leaves outside /app (an exit-code task's runs) ----------------------------------
# An exit-code task's canary is one run of the test command among the fail-to-pass run and its
# repeat, in a random order: code that remembered an earlier run (a counter in /tmp, the home
# directory, a shared memory segment) could tell the runs apart. Before each such run, what the
# verifier user can write outside /app comes back as it was at the lockdown: what a run added
# there goes, what it changed is restored from a snapshot, and its System V objects go.
my $OUTSIDE = "$WORK/outside.json";
my $OUTSIDE_TAR = "$WORK/outside.tar";
my $OUTSIDE_MAX_BYTES = 64 << 20;
# Mounts of their own that find -xdev does not enter, each writable by every user.
my @OUTSIDE_MOUNTS = ('/dev/shm', '/dev/mqueue');

# writable_outside: the directories and files outside /app the verifier user can change (owns,
# or may write), links aside; /proc, /sys and the runner's own trees are not walked.
sub writable_outside {
    @VERIFIER = (getpwnam('verifier'))[2, 3] unless @VERIFIER;
    return ([], []) unless defined $VERIFIER[0];
    my @roots = ('/', grep { -d $_ && !-l $_ } @OUTSIDE_MOUNTS);
    open(my $fh, '-|', 'find', @roots, '-xdev',
      '(', '-path', '/proc', '-o', '-path', '/sys', '-o', '-path', $APP, '-o', '-path', $WORK,
      '-o', '-path', $EVIDENCE_ROOT, '-o', '-path', '/tests', '-o', '-path', $LOGS, ')', '-prune',
      '-o', '(', '!', '-type', 'l', '(', '-uid', $VERIFIER[0], '-o', '-perm', '-0002', ')', ')',
      '-print0') or fail("cannot list what the verifier user may write: $!");
    local $/;
    my $raw = <$fh> // '';
    close $fh;
    my (@dirs, @files);
    for my $path (grep { length } split /\0/, $raw) {
        if (-d $path && !-l $path) { push @dirs, $path } else { push @files, $path }
    }
    return (\@dirs, \@files);
}

sub record_outside {
    # The held-out file the canary changes, as the lockdown leaves it: every run of the task gets
    # its own copy of it written in place (put_canary_file), so that its times and inode are the
    # same in every run whichever version it holds.
    my $canary = exit_code_canary();
    my $held = "$APP/$canary->{file}";
    my @st = lstat $held;
    if (@st && -f _) {
        write_file("$WORK/canary-original", read_file($held, 64 << 20) // '');
        write_json("$WORK/canary-times", { atime => $st[8], mtime => $st[9] });
    }
    my ($dirs, $files) = writable_outside();
    my %entries;
    for my $dir (@$dirs) {
        opendir(my $dh, $dir) or next;
        $entries{$dir} = [sort grep { $_ ne '.' && $_ ne '..' } readdir $dh];
        closedir $dh;
    }
    my $bytes = 0;
    $bytes += (lstat $_)[7] // 0 for @$files;
    my $snapshot = $bytes <= $OUTSIDE_MAX_BYTES;
    if ($snapshot && (@$dirs || @$files)) {
        # The directories themselves (their modes and owners) and the files, as they are.
        open(my $list, '>', "$OUTSIDE_TAR.list") or fail("cannot write $OUTSIDE_TAR.list");
        print {$list} map { "$_\0" } (@$dirs, @$files);
        close $list;
        $snapshot = system('tar', '--create', '--file', $OUTSIDE_TAR, '--null', '--no-recursion',
          '--numeric-owner', '--files-from', "$OUTSIDE_TAR.list") == 0;
        unlink "$OUTSIDE_TAR.list";
    }
    say_line("what the tests may write outside /app is $bytes bytes: it is cleared between runs, "
      . 'not restored') unless $snapshot;
    write_json($OUTSIDE, { entries => \%entries, snapshot => $snapshot ? JSON::PP::true() : JSON::PP::false() });
    chmod 0600, $OUTSIDE, $OUTSIDE_TAR;
    return 0;
}

# restore_outside: before a run of an exit-code task (its processes are gone): every entry a
# writable directory did not hold at the lockdown goes, the snapshot comes back, and the verifier
# user's System V shared memory, semaphores and message queues are removed.
sub restore_outside {
    my $was = read_json($OUTSIDE) // return;
    # Only the lockdown's writable directories are looked at: a directory the verifier user can
    # write now either was one (it owned it, or it was open to all) or is new inside one.
    my %known = %{ $was->{entries} // {} };
    for my $dir (sort keys %known) {
        # Never through a link: a directory the tests replaced by a link (to /etc, say) at any
        # level above is not walked (its parent removes or restores it).
        next unless no_link_on_the_way($dir) && -d $dir;
        my %had = map { $_ => 1 } @{ $known{$dir} };
        opendir(my $dh, $dir) or next;
        my @new = grep { $_ ne '.' && $_ ne '..' && !$had{$_} } readdir $dh;
        closedir $dh;
        system('rm', '-rf', '--', map { "$dir/$_" } @new) if @new;
    }
    if ($was->{snapshot} && -f $OUTSIDE_TAR) {
        system('tar', '--extract', '--file', $OUTSIDE_TAR, '--directory', '/', '--no-recursion',
          '--numeric-owner', '--same-owner', '--same-permissions', '--overwrite') == 0
          or say_line('what the tests may write outside /app could not be restored');
    }
    remove_verifier_ipc();
}

sub no_link_on_the_way {
    my ($path) = @_;
    my $at = '';
    for my $part (grep { length } split m{/}, $path) {
        $at .= "/$part";
        return 0 if -l $at;
    }
    return 1;
}

# put_canary_file CANARY KIND: the held-out file the exit-code canary changes, written in place
# before a run of an exit-code task: the canary's version for the canary run, the original for
# the others (when the lockdown recorded it), with the lockdown's access and modification times
# (its change time is every run's own). False when the original was to be written and was not
# recorded.
sub put_canary_file {
    my ($canary, $kind) = @_;
    my $content = $kind eq 'canary' ? $canary->{content}
      : read_file("$WORK/canary-original", 64 << 20) // return 0;
    my $full = "$APP/$canary->{file}";
    sysopen(my $fh, $full, O_WRONLY | O_TRUNC | O_NOFOLLOW) or fail("cannot write $full: $!");
    print {$fh} $content;
    close $fh;
    my $times = read_json("$WORK/canary-times");
    utime $times->{atime}, $times->{mtime}, $full if $times;
    return 1;
}

sub remove_verifier_ipc {
    @VERIFIER = (getpwnam('verifier'))[2, 3] unless @VERIFIER;
    return unless defined $VERIFIER[0];
    require IPC::SysV;
    for my $kind (['shm', sub { shmctl($_[0], IPC::SysV::IPC_RMID(), 0) }],
                  ['sem', sub { semctl($_[0], 0, IPC::SysV::IPC_RMID(), 0) }],
                  ['msg', sub { msgctl($_[0], IPC::SysV::IPC_RMID(), 0) }]) {
        my ($name, $remove) = @$kind;
        open(my $fh, '<', "/proc/sysvipc/$name") or next;
        my $header = <$fh> // next;
        my @columns = split ' ', $header;
        my ($id_at) = grep { $columns[$_] eq ($name eq 'shm' ? 'shmid' : $name eq 'sem' ? 'semid' : 'msqid') } 0 .. $#columns;
        my ($uid_at) = grep { $columns[$_] eq 'uid' } 0 .. $#columns;
        next unless defined $id_at && defined $uid_at;
        while (my $line = <$fh>) {
            my @fields = split ' ', $line;
            $remove->($fields[$id_at]) if ($fields[$uid_at] // -1) == $VERIFIER[0];
        }
        close $fh;
    }
}

sub cmd_reset {
    my ($task_path) = @_;
    my $index = "$WORK/prepared.index";
    my $manifest = load_manifest();
    return 0 unless -f $index && $manifest;
    if (-f $OUTSIDE) {
        kill_verifier_processes();  # nothing of the last run writes while it is undone
        restore_outside();
    }
    # What the run added goes, wherever it is (ignored directories too): only the directories a
    # run can add to are walked.
    my $was = $manifest->{entries};
    my $now = scan_tree($manifest->{open});
    my @gone;
    for my $path (sort keys %{ $now->{entries} }) {
        next if exists $was->{$path};
        next if @gone && index($path, "$gone[-1]/") == 0;  # inside what went already
        next if $path =~ m{(^|/)\.\.?(/|$)};
        system('rm', '-rf', '--', "$APP/$path") == 0 or fail("cannot remove $APP/$path");
        push @gone, $path;
    }
    # Changed and deleted tracked files come back from the prepared index; an exit-code task's
    # canary file is put back in place (a checkout would give it a new inode, which the next
    # run could tell from the one every run before the canary's saw).
    my @changed = zsplit(git_out($index, 'diff-files', '--name-only', '-z'));
    if (-f $OUTSIDE and my $canary = exit_code_canary()) {
        @changed = grep { $_ ne $canary->{file} } @changed;
        put_canary_file($canary, 'original');
    }
    if (@changed) {
        my ($code) = git_run($index, undef, 'checkout-index', '--force', '--', @changed);
        fail('cannot restore the prepared tree') if $code != 0;
        my %protected = map { $_ => 1 } split /\n/, read_file("$WORK/protected") // '';
        my (undef, undef, $uid, $gid) = getpwnam('verifier');
        for my $path (@changed) {
            my $full = "$APP/$path";
            next if -l $full || !-f $full;
            if ($protected{$path}) {
                chmod((((stat $full)[2] & 07777) & ~0222) | 0444, $full);
            } elsif (defined $uid) {
                chown $uid, $gid, $full;  # as before the run: the tests' own to change
            }
        }
    }
    # The manifest follows what the reset restored (a restored file is a new file): the entries of
    # every walked directory are read again.
    my $after = scan_tree($manifest->{open});
    my %walked = map { $_ => 1 } ('.', keys %{ $manifest->{open} });
    my %entries = map { $_ => $was->{$_} } grep { !$walked{ dirname($_) } } keys %$was;
    @entries{ keys %{ $after->{entries} } } = values %{ $after->{entries} };
    save_manifest({ entries => \%entries, open => $manifest->{open} });
    return 0;
}

# in_child CODE ARGS: CODE(ARGS) in a forked child, as if test.sh had started the helper for it
# (its fail() ends the child alone); its exit status. One start of this helper (about 30 ms of
# CPU, most of it compiling) serves two steps.
sub in_child {
    my ($code, @args) = @_;
    my $pid = fork // fail("cannot fork: $!");
    exit($code->(@args) // 0) unless $pid;
    waitpid($pid, 0);
    return $? >> 8 || ($? & 127 ? 128 + ($? & 127) : 0);
}

# reset-run TASK: reset, then run (a test run after the first). A failed reset
# is said and the run goes on.
sub cmd_reset_run {
    my ($task_path) = @_;
    say_line('reset failed') if in_child(\&cmd_reset, $task_path) != 0;
    return cmd_run($task_path);
}

# canaries-lockdown TASK: canaries, then lockdown, once test.patch is applied. Canaries that
# could not be written are said and the lockdown goes on; its status is the command's.
sub cmd_canaries_lockdown {
    my ($task_path) = @_;
    say_line('the canaries could not be written') if in_child(\&cmd_canaries, $task_path) != 0;
    return cmd_lockdown($task_path);
}

# ---- evidence -----------------------------------------------------------------------------------
# Per-test outcomes come from reporters loaded from outside /app (pytest and unittest through
# the site directories, jest, vitest, mocha and node --test through node's preload, go test
# through -json), or from the runner's own output where it has no reporter to load (bun test,
# cargo test). Outcomes: passed, failed, skipped, error.

# Every runner the verifier knows reports its run's end (or prints it, for one read from its output).
my %FINISHING = map { $_ => 1 } keys %RUNNERS;

sub normalize_abs {
    my ($path) = @_;
    my @out;
    for my $part (split m{/}, $path) {
        next if $part eq '' || $part eq '.';
        if ($part eq '..') { pop @out; next }
        push @out, $part;
    }
    return '/' . join('/', @out);
}

sub workdir_abs { my ($task) = @_; return normalize_abs("$APP/$task->{workdir}") }

sub json_lines {
    my ($path) = @_;
    my $raw = read_file($path) // return ();
    my @events;
    for my $line (split /\n/, $raw) {
        next unless $line =~ /^\{/;
        my $event = eval { $JSON->decode($line) };
        push @events, $event if ref($event) eq 'HASH';
    }
    return @events;
}

# Outcomes, worst first. Only `passed` passes a fail-to-pass test; a pass-to-pass test may also be
# skipped or an expected failure (xfailed), or pass unexpectedly (xpassed), as at the oracle.
my %RANK = (error => 6, failed => 5, xpassed => 4, xfailed => 3, passed => 2, skipped => 1);
my %P2P_OK = map { $_ => 1 } qw(passed skipped xfailed xpassed);

sub add_test {
    my ($run, $runner, $id, $file, $outcome, $asserts) = @_;
    return unless defined $id && length $id && $outcome && $RANK{$outcome};
    my $key = "$runner\0$id";
    my $tests = $run->{tests};
    if (my $seen = $tests->{$key}) {
        # The same id reported twice with two outcomes: a record was forged beside the runner's
        # (the reporters report each test once). The worst outcome counts, and the run fails.
        if ($seen->{outcome} ne $outcome) {
            push @{ $run->{duplicates} }, "$id ($seen->{outcome}, then $outcome)"
              if @{ $run->{duplicates} // [] } < 20;
            $seen->{outcome} = $outcome if $RANK{$outcome} > $RANK{ $seen->{outcome} };
        }
        return;
    }
    return if keys(%$tests) >= $MAX_TESTS;
    $tests->{$key} = { id => $id, runner => $runner, outcome => $outcome,
      (defined $file ? (file => $file) : ()),
      (defined $asserts && $asserts =~ /^\d+$/ ? (asserts => $asserts + 0) : ()) };
}

# read_events RUN EVENTS: the collector's verified records (each with its connection `_conn` and
# the pid `_pid` that connection came from), by runner session. A reporter opens its runner's
# session (`start`, with a `scope` for go: the package its test binary runs) and closes it
# (`finish`); every other record of that runner must come over the connection holding the open
# session. A second session of one runner and scope while one is open (a stand-in reporter), a
# record from a connection that holds no session, a record the collector could not verify: each
# is tampering.
sub read_events {
    my ($run, $events, $conns) = @_;
    my (%open, %pid_of, @stream, %process, %records, %runner_conn, %first);
    # A pid's process session is on the first connection it made (the collector accepts in order).
    for my $conn (@{ $conns // [] }) {
        $first{ $conn->{pid} } = $conn->{id}
          if !defined $first{ $conn->{pid} } || $conn->{id} < $first{ $conn->{pid} };
    }
    my $tamper = sub { push @{ $run->{tampered} }, $_[0] if @{ $run->{tampered} } < 20 };
    for my $event (@$events) {
        my ($conn, $pid) = ($event->{_conn} // 0, $event->{_pid} // '?');
        $pid_of{$conn} = $pid;
        my $runner = $event->{runner} // '';
        my $type = $event->{t} // '';
        if ($type eq 'tamper') {
            $tamper->(substr("$event->{what}", 0, 300) . " (pid $pid)") if defined $event->{what};
            next;
        }
        if ($runner eq 'go-stream') {
            push @stream, $event->{event} if ref($event->{event}) eq 'HASH';
            next;
        }
        if ($runner =~ /^(python|node)$/) {
            # A process session: the first record of a connection its process made at start-up.
            if ($type eq 'start') {
                if ($process{$conn} || $records{$conn} || ($first{$pid} // $conn) != $conn) {
                    $tamper->("pid $pid opened a $runner process session on a connection it made late");
                } else {
                    $process{$conn} = { runner => $runner, open => 1 };
                }
            } elsif ($type eq 'finish' && $process{$conn}) {
                $process{$conn}{open} = 0;
            }
            $records{$conn}++;
            next;
        }
        $records{$conn}++;
        next unless ($RUNNERS{$runner}{evidence} // '') eq 'reporter';
        my $session = $runner . (defined $event->{scope} ? " $event->{scope}" : '');
        if ($type eq 'start') {
            if (defined $open{$session} && $open{$session} != $conn) {
                $tamper->("two $session reporters at once (pid $pid beside pid $pid_of{$open{$session}})");
            }
            if ($runner ne 'go' && !($process{$conn} && $process{$conn}{open})) {
                $tamper->("a $runner session opened by pid $pid on a connection made after its process started");
                next;
            }
            if ($runner ne 'go' && $process{$conn}{runners}{$runner}++) {
                $tamper->("pid $pid opened a second $runner session");
                next;
            }
            $runner_conn{$runner}{$conn} = 1;
            $open{$session} = $conn;
            $run->{go_scopes}{ $event->{scope} } = 1 if $runner eq 'go' && defined $event->{scope};
            $run->{seen}{$runner} = 1 unless $runner eq 'go';
            $run->{sessions}{$runner}++;
            $run->{versions}{$runner} = "$event->{version}" if defined $event->{version};
            next;
        }
        if ($type eq 'version') {
            $run->{versions}{$runner} = "$event->{version}" if defined $event->{version};
            next;
        }
        if (!defined $open{$session} || $open{$session} != $conn) {
            $tamper->("a $runner record from pid $pid, which holds no open $session session");
            next;
        }
        if ($runner eq 'go' && ($type eq 'test' || $type eq 'begin')) {
            # The reporter inside a go test binary: what the binary's output says is checked
            # against it (go_cross_check).
            my $id = $event->{id} // next;
            if ($type eq 'begin') { $run->{go_begun}{$id} = 1 } else { $run->{go_ended}{$id} = "$event->{outcome}" }
        } elsif ($type eq 'test') {
            add_test($run, $runner, $event->{id}, $event->{file}, $event->{outcome}, $event->{asserts});
        } elsif ($type eq 'finish') {
            delete $open{$session};
            $run->{finishes}{$runner}++;
            if (defined $event->{status}) {
                my $was = $run->{runnerStatus}{$runner};
                $run->{runnerStatus}{$runner} = "$event->{status}" unless defined $was && $was ne '0';
            }
        } elsif ($type eq 'plugin' && defined $event->{file}) {
            push @{ $run->{plugins} }, "$event->{file}";
        }
    }
    # A runner finished when every session it opened was closed by its reporter, and each process
    # that held one ended normally (its interpreter's shutdown, not os._exit or a signal).
    for my $runner (keys %{ $run->{sessions} // {} }) {
        my @abrupt = grep { $process{$_} && $process{$_}{open} } keys %{ $runner_conn{$runner} // {} };
        if (@abrupt) {
            $run->{abrupt}{$runner} = join(', ', map { "pid $pid_of{$_}" } sort @abrupt);
            next;
        }
        $run->{finished}{$runner} = 1 if ($run->{finishes}{$runner} // 0) >= $run->{sessions}{$runner};
    }
    read_go_events($run, \@stream) if @stream;
}

# go_cross_check RUN PACKAGES: each test a go test binary's output reports (test2json's framing,
# which any code in the binary can print) must have ended in the verifier's reporter inside that
# binary, for the packages that have it (PACKAGES); a subtest, its top-level test. A test that
# began there and never ended was cut off under it (syscall.Exit, a crash).
sub go_cross_check {
    my ($run, $packages) = @_;
    return unless %$packages;
    my ($ended, $begun, $scopes) = map { $run->{$_} // {} } qw(go_ended go_begun go_scopes);
    my (%bad, %in_stream);
    for my $key (sort keys %{ $run->{tests} }) {
        my $test = $run->{tests}{$key};
        next unless $test->{runner} eq 'go';
        my ($package, $name) = split / /, $test->{id}, 2;
        next unless defined $name && $packages->{$package} && $name ne '[build failed]';
        my ($top) = split m{/}, $name, 2;
        my $id = "$package $top";
        $in_stream{$id} = 1;
        my $trusted = $ended->{$id};
        if (!defined $trusted) {
            my $why = $begun->{$id} ? "began and never ended in its binary (an exit that skips the test framework)"
              : !$scopes->{$package} ? "is in the output of a binary whose tests never started (output printed before the tests ran, or a stand-in test main)"
              : "is in the output but never ran in its binary";
            $bad{$test->{id}} = "$test->{id} $why";
            $test->{outcome} = 'error';
        } elsif ($top eq $name && $trusted ne 'ran' && $RANK{$trusted} && $RANK{$trusted} > $RANK{ $test->{outcome} }) {
            $test->{outcome} = $trusted;  # the output says better than the framework saw
        }
    }
    # A test that ended (or began) in its binary but that the output hides is reported as it ended.
    for my $id (sort(keys %$ended), sort(keys %$begun)) {
        next if $in_stream{$id};
        my ($package) = split / /, $id, 2;
        next unless $packages->{$package};
        my $outcome = $ended->{$id} // 'error';
        $outcome = 'passed' if $outcome eq 'ran';
        add_test($run, 'go', $id, $package, $outcome);
        $in_stream{$id} = 1;
    }
    my @bad = map { $bad{$_} } sort keys %bad;
    push @{ $run->{channel_problems} }, 'the go test output reports what the test framework did not: '
      . shorten(\@bad, 3) if @bad;
}

# read_go_events RUN EVENTS: `go test -json` events (test2json's, from the go command's output).
sub read_go_events {
    my ($run, $events) = @_;
    my (%started, %done);
    for my $event (@$events) {
        my $action = $event->{Action} // next;
        my $package = $event->{Package} // next;
        $run->{seen}{go} = 1;
        my $test = $event->{Test};
        if (defined $test && length $test) {
            my $id = "$package $test";
            my %map = (pass => 'passed', fail => 'failed', skip => 'skipped');
            if ($map{$action}) {
                add_test($run, 'go', $id, $package, $map{$action});
            } elsif ($action eq 'run') {
                $started{$id} = $package;
            }
            $done{$id} = 1 if $map{$action};
        } elsif ($action =~ /^(pass|fail|skip)$/) {
            $run->{goPackages}{$package} = $action;
            if ($action eq 'fail' && defined $event->{FailedBuild}) {
                add_test($run, 'go', "$package [build failed]", $package, 'error');
            }
        } elsif ($action eq 'build-fail') {
            add_test($run, 'go', "$package [build failed]", $package, 'error');
        }
    }
    # A test that started and never ended: its binary exited under it (os.Exit, a crash).
    for my $id (sort keys %started) {
        add_test($run, 'go', $id, $started{$id}, 'error') unless $done{$id};
    }
    my @packages = keys %{ $run->{goPackages} // {} };
    $run->{finished}{go} = 1 if @packages && !grep { !defined } @packages;
}

sub strip_ansi { my ($text) = @_; $text =~ s/\e\[[0-9;?]*[A-Za-z]//g; $text =~ s/\r//g; return $text }

# The runners whose tests are read from their output (the vocabulary's `evidence: output`): each
# one's reader is hooks/RUNNER/output.pl beside this helper, a sub (RUN, TASK, LOG) that adds the
# tests the log shows and marks the run seen and finished as the log says.
my %OUTPUT_READERS;
sub output_reader {
    my ($runner) = @_;
    return $OUTPUT_READERS{$runner} //= do {
        my $file = "$HELPER_DIR/hooks/$runner/output.pl";
        my $reader = do $file;
        fail("cannot load $file: " . ($@ || $! || 'no reader')) unless ref $reader eq 'CODE';
        $reader;
    };
}

sub output_runners {
    my (@names) = @_;
    return grep { ($RUNNERS{$_}{evidence} // '') eq 'output' } @names;
}

# ---- the collector: one test run, as root -----------------------------------------------------
# `run` starts the test command as the verifier user and is, until the command and every process
# it left have ended, the only place evidence goes: the runners' reporters connect to its socket
# (an abstract unix socket: no file to replace) and send records signed with a key the collector
# gave that connection; the command's output comes through a pipe. The collector, root, writes the
# log, the records and the judgement where the tests can neither write nor read; the tests cannot
# signal or trace it. The command's end is what the collector saw (it reaped it), never what a
# test process says; then every verifier process is killed and the records read to their end.
#
# A run of the fail-to-pass selection whose first test failed has reward 0 whatever the rest does
# (every failed test of a run is a problem of it), so under SELFBENCH_STOP_AT_FAILURE (the hack
# gate, which needs only the reward) the collector ends the run at the first failed test a counted
# runner reports.

my $DRAIN_SECONDS = 2;
my $MAX_LINE = 1 << 20;

sub random_hex {
    my ($bytes) = @_;
    open(my $fh, '<', '/dev/urandom') or fail("cannot read /dev/urandom: $!");
    my $got = sysread($fh, my $raw, $bytes);
    close $fh;
    fail('short read from /dev/urandom') unless $got && $got == $bytes;
    return unpack('H*', $raw);
}

sub kill_verifier_processes { system('pkill', '-KILL', '-u', 'verifier') }

# The failed test one record reports, as (runner, id), when RUNNERS count it; else ().
sub failure_in {
    my ($event, $runners) = @_;
    if (($event->{runner} // '') eq 'go-stream') {
        return () unless $runners->{go} && ref($event->{event}) eq 'HASH';
        my $go = $event->{event};
        my ($action, $test, $package) = ($go->{Action} // '', $go->{Test} // '', $go->{Package});
        return () unless defined $package;
        return ('go', "$package $test") if $action eq 'fail' && length $test;
        return ('go', "$package [build failed]")
          if $action eq 'build-fail' || ($action eq 'fail' && defined $go->{FailedBuild});
        return ();
    }
    my ($outcome, $runner) = ($event->{outcome} // '', $event->{runner} // '');
    return () unless ($event->{t} // '') eq 'test' && $runners->{$runner};
    return ($runner, $event->{id} // '(unnamed)') if $outcome eq 'failed' || $outcome eq 'error';
    return ();
}

# A failed test in one line of the output of a runner read from its output, as (runner, id): the
# vocabulary's `failedLine`, whose capture is the test.
my %FAILED_LINE = map { $_ => qr/$RUNNERS{$_}{failedLine}/ }
  grep { defined $RUNNERS{$_}{failedLine} } keys %RUNNERS;
sub failure_in_output {
    my ($runner, $line) = @_;
    my $pattern = $FAILED_LINE{$runner} // return ();
    return strip_ansi($line) =~ $pattern ? ($runner, $1) : ();
}

# The log, capped as it is written: its first half-limit bytes, then the last half-limit bytes
# (kept in memory), with a line saying what was cut. The output is echoed under the same cap.
sub log_sink {
    my ($path, $limit) = @_;
    sysopen(my $fh, $path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644) or fail("cannot write $path: $!");
    my $half = int($limit / 2);
    return { fh => $fh, half => $half, head => 0, tail => '', cut => 0 };
}

sub log_write {
    my ($sink, $chunk) = @_;
    my $room = $sink->{half} - $sink->{head};
    if ($room > 0) {
        my $part = substr($chunk, 0, $room);
        syswrite($sink->{fh}, $part);
        syswrite(STDOUT, $part);
        $sink->{head} += length $part;
        $chunk = substr($chunk, length $part);
    }
    return unless length $chunk;
    $sink->{tail} .= $chunk;
    if (length($sink->{tail}) > 2 * $sink->{half}) {
        my $drop = length($sink->{tail}) - $sink->{half};
        $sink->{cut} += $drop;
        $sink->{tail} = substr($sink->{tail}, $drop);
    }
}

sub log_close {
    my ($sink) = @_;
    my $tail = $sink->{tail};
    if (length($tail) > $sink->{half}) {
        my $drop = length($tail) - $sink->{half};
        $sink->{cut} += $drop;
        $tail = substr($tail, $drop);
    }
    if ($sink->{cut}) {
        my $note = sprintf("\n[selfbench: %d bytes cut from the middle of this log (limit %d bytes)]\n",
          $sink->{cut}, 2 * $sink->{half});
        syswrite($sink->{fh}, $note);
        syswrite(STDOUT, $note);
    }
    syswrite($sink->{fh}, $tail);
    syswrite(STDOUT, $tail);
    close $sink->{fh};
    return $sink->{cut} ? 1 : 0;
}

# The test command's environment: the verifier's, without the runner's controls and the shell's
# start-up files, with the run's own temporary directories and the channel's address.
sub test_environment {
    my ($scratch, $address) = @_;
    my %env = %ENV;
    delete @env{ grep { /^SELFBENCH_/ } keys %env };
    delete @env{qw(BASH_ENV ENV CDPATH GIT_INDEX_FILE)};
    %env = (%env,
        PATH => $ENV{SELFBENCH_TEST_PATH} // '/usr/local/bin:/usr/bin:/bin',
        HOME => '/home/verifier', USER => 'verifier', LOGNAME => 'verifier',
        TMPDIR => $scratch, PYTHONPYCACHEPREFIX => (-d $PYCACHE ? $PYCACHE : "$scratch/pycache"),
        SELFBENCH_EVIDENCE_SOCKET => "\@$address",
        # The test mode with the in-process checks off: the guards inside the runners too.
        ($CHECKS eq 'canaries' ? (SELFBENCH_GUARDS => 'off') : ()),
        NODE_OPTIONS => "--require $HOOKS/node/preload.cjs" . (defined $ENV{NODE_OPTIONS} ? " $ENV{NODE_OPTIONS}" : ''),
    );
    return \%env;
}

# start_command COMMAND ENV LOG-WRITER: the command as the verifier user, in a session of its own,
# its output into the pipe. Returns its pid.
sub start_command {
    my ($command, $env, $log_w) = @_;
    my (undef, undef, $uid, $gid) = getpwnam('verifier');
    fail('no verifier user') unless defined $uid;
    require POSIX;
    my $pid = fork // fail("cannot fork: $!");
    return $pid if $pid;
    POSIX::setsid();
    open(STDIN, '<', '/dev/null') or POSIX::_exit(126);
    POSIX::dup2(fileno($log_w), 1) // POSIX::_exit(126);
    POSIX::dup2(fileno($log_w), 2) // POSIX::_exit(126);
    $) = "$gid $gid";
    POSIX::setgid($gid) or POSIX::_exit(126);
    POSIX::setuid($uid) or POSIX::_exit(126);
    POSIX::_exit(126) if $< != $uid || $> != $uid || $( != $gid;
    %ENV = %$env;
    exec('/bin/bash', '-c', $command) or POSIX::_exit(127);
}

# serve: the collector's loop; returns { status, events, conns, stopped }.
sub serve {
    my ($server, $log_r, $pid, $sink, $watch) = @_;
    require IO::Select;
    require POSIX;
    my $select = IO::Select->new($server, $log_r);
    my (%conns, @all, @events, $status, $deadline, $stopped, $log_rest);
    my $next = 0;
    my $bytes = 0;
    my $stop = sub {
        my ($runner, $id) = @_;
        return if $stopped;
        $id =~ s/[\t\n]/ /g;
        $stopped = { runner => $runner, id => substr($id, 0, 500) };
        kill_verifier_processes();
    };
    my $add = sub {
        my ($event, $conn) = @_;
        $event->{_conn} = $conn->{id};
        $event->{_pid} = $conn->{pid};
        push @events, $event;
        if ($watch && !$stopped) {
            my ($runner, $id) = failure_in($event, $watch->{runners});
            $stop->($runner, $id) if defined $id && !is_canary_failure($watch->{canaries}, $id);
        }
    };
    my $output_open = 1;
    while (1) {
        # Once the command's output has closed it is ending: look for its end often, not at the
        # next 0.2 s tick (three test runs a verifier would wait up to 0.6 s for nothing).
        for my $fh ($select->can_read($output_open ? 0.2 : 0.005)) {
            if ($fh == $server) {
                my $client = $server->accept or next;
                my ($cpid) = unpack('l', getsockopt($client, Socket::SOL_SOCKET(), Socket::SO_PEERCRED()) // pack('lll', -1, -1, -1));
                my $conn = { id => ++$next, pid => $cpid, key => random_hex(32), buf => '', fh => $client };
                syswrite($client, "$conn->{key}\n");
                $conns{ fileno $client } = $conn;
                push @all, $conn;
                $select->add($client);
                next;
            }
            my $got = sysread($fh, my $chunk, 65536);
            if ($fh == $log_r) {
                if (!$got) { $select->remove($log_r); $output_open = 0; next }
                log_write($sink, $chunk);
                if ($watch && $watch->{output} && !$stopped) {
                    my @lines = split /\n/, ($log_rest // '') . $chunk, -1;
                    $log_rest = pop @lines;
                    $log_rest = '' if length($log_rest) > $MAX_LINE;
                    for my $line (@lines) {
                        my ($runner, $id) = failure_in_output($watch->{output}, $line);
                        next if !defined $id || is_canary_failure($watch->{canaries}, $id);
                        $stop->($runner, $id);
                        last;
                    }
                }
                next;
            }
            my $conn = $conns{ fileno $fh };
            if (!$got) { $select->remove($fh); delete $conns{ fileno $fh }; close $fh; next }
            $bytes += $got;
            if ($bytes > $MAX_EVIDENCE_BYTES) {
                $add->({ t => 'tamper', what => "more than $MAX_EVIDENCE_BYTES bytes of evidence" }, $conn)
                  unless $conn->{over}++;
                next;
            }
            $conn->{buf} .= $chunk;
            while ($conn->{buf} =~ s/^([^\n]*)\n//) {
                my $line = $1;
                my ($mac, $json) = split / /, $line, 2;
                my $event = defined $json && hmac_sha256_hex($json, pack('H*', $conn->{key})) eq ($mac // '')
                  ? eval { $JSON->decode($json) } : undef;
                if (ref($event) ne 'HASH') {
                    $add->({ t => 'tamper', what => 'an evidence record its reporter did not sign: '
                      . substr($line, 0, 120) }, $conn) unless $conn->{unsigned}++ >= 3;
                    next;
                }
                $add->($event, $conn);
            }
            $conn->{buf} = '' if length($conn->{buf}) > $MAX_LINE;
        }
        if (!defined $status && waitpid($pid, POSIX::WNOHANG()) == $pid) {
            $status = $?;
            # What the command left running ends with it: only then are the records complete.
            kill_verifier_processes();
            $deadline = Time::HiRes::time() + $DRAIN_SECONDS;
        }
        last if defined $status && ($select->count <= 1 || Time::HiRes::time() > $deadline);
    }
    close $_->{fh} for values %conns;
    my $code = $status & 127 ? 128 + ($status & 127) : $status >> 8;
    return { status => $code, events => \@events, conns => [ map { { id => $_->{id}, pid => $_->{pid} } }
      @all ], stopped => $stopped };
}

# exit_code_canary: the exit-code canary the canaries step made ready (the first), or undef.
sub exit_code_canary {
    my %ready = map { $_ => 1 } @{ (read_json($CANARY_STATE) // {})->{exitCode} // [] };
    my (undef, $exits) = canaries_wanted();
    my ($canary) = grep { $ready{ $_->{key} } } @$exits;
    return $canary;
}

# canary-ready TASK: exit 0 when an exit-code canary is to run (the run is judged by exit codes:
# the census says so once sealed; before, the oracle's fail-to-pass run left no per-test evidence).
sub cmd_canary_ready {
    my ($task_path) = @_;
    return 1 unless exit_code_canary();
    my $sealed = census();
    if ($sealed) {
        return ((($sealed->{failToPass} // {})->{mode} // 'exit-code') eq 'per-test') ? 1 : 0;
    }
    my $doc = read_json("$LOGS/evidence/fail_to_pass.json") // return 0;
    return ($doc->{mode} // '') eq 'per-test' ? 1 : 0;
}

# canary-sealed TASK: exit 0 when an exit-code canary run is due by a sealed census (its
# fail-to-pass selection judged by exit codes), known before any run: then the runs go in a
# random order (test.sh).
sub cmd_canary_sealed {
    my ($task_path) = @_;
    return 1 unless exit_code_canary();
    my $sealed = census() // return 1;
    return ((($sealed->{failToPass} // {})->{mode} // 'exit-code') eq 'per-test') ? 1 : 0;
}

# run TASK: one test run (its NAME, KIND and COMMAND in SELFBENCH_RUN_NAME, _KIND, _COMMAND) (NAME: fail_to_pass, pass_to_pass, ...), collected and
# judged; /logs/verifier/NAME.log, /logs/verifier/evidence/NAME.json; prints `passed=0|1`, the
# command's exit status and its milliseconds to /opt/selfbench/work/NAME.result.
sub cmd_run {
    my ($task_path) = @_;
    # The run's name, kind and command come in the environment, not as arguments: a test process
    # reads every process's arguments (/proc/PID/cmdline), never root's environment, and the
    # canary run must look like any other. So does its scratch directory's name.
    my ($name, $kind, $command) = @ENV{qw(SELFBENCH_RUN_NAME SELFBENCH_RUN_KIND SELFBENCH_RUN_COMMAND)};
    fail('no run named') unless defined $name && defined $kind && defined $command;
    fail("bad run name $name") unless $name =~ /^[A-Za-z0-9_]+$/;
    my $task = task($task_path);
    my ($evidence, $scratch) = ("$EVIDENCE_ROOT/$name", '/tmp/selfbench-run-' . random_hex(8));
    system('rm', '-rf', '--', $evidence, glob('/tmp/selfbench-run-*'));
    system('mkdir', '-p', '-m', '0700', $EVIDENCE_ROOT, $evidence, $WORK, $LOGS) == 0 or fail("cannot make $evidence");
    mkdir $scratch, 0700 or fail("cannot make $scratch: $!");
    my (undef, undef, $uid, $gid) = getpwnam('verifier');
    chown $uid, $gid, $scratch;
    my $address = 'selfbench-' . random_hex(16);
    require IO::Socket::UNIX;
    my $server = IO::Socket::UNIX->new(Type => Socket::SOCK_STREAM(), Local => "\0$address", Listen => 256)
      or fail("cannot listen for evidence: $!");
    pipe(my $log_r, my $log_w) or fail("cannot make a pipe: $!");
    my $limit = ($ENV{SELFBENCH_MAX_LOG_BYTES} // '') =~ /^(\d+)$/ ? $1 : 20 << 20;
    my $sink = log_sink("$LOGS/$name.log", $limit);
    my $watch;
    if ($ENV{SELFBENCH_STOP_AT_FAILURE} && $kind eq 'f2p') {
        my $sealed = census();
        my %runners = map { $_ => 1 } $sealed ? @{ ($sealed->{failToPass} // {})->{runners} // [] }
          : keys %RUNNERS;
        my ($output) = grep { $runners{$_} } output_runners(@{ $task->{expectedRunners} // [] });
        $output //= '';
        $watch = { runners => \%runners, output => $output,
          canaries => canary_matchers(applied_canaries()) };
    }
    if ($kind eq 'canary' || -f $OUTSIDE) {
        # The exit-code canary: the held-out file with one expected value changed, for this run;
        # every other run of such a task gets the original written the same way.
        my $canary = exit_code_canary() or fail('no exit-code canary to run');
        put_canary_file($canary, $kind) or fail('the canary\'s held-out file was not recorded');
    }
    kill_verifier_processes();
    my $started = Time::HiRes::time();
    my $pid = start_command($command, test_environment($scratch, $address), $log_w);
    close $log_w;
    my $result = serve($server, $log_r, $pid, $sink, $watch);
    my $ms = int((Time::HiRes::time() - $started) * 1000);
    close $server;
    my $truncated = log_close($sink);
    open(my $out, '>', "$evidence/events.jsonl") or fail("cannot write $evidence/events.jsonl");
    print {$out} $JSON->encode($_), "\n" for @{ $result->{events} };
    close $out;
    write_json("$evidence/connections.json", $result->{conns});
    my $passed = judge_and_write($task, $name, $kind, $result->{status}, "$LOGS/$name.log",
      $result->{events}, $result->{conns}, $result->{stopped});
    say_line("$name stopped at its first failed test: $result->{stopped}{id}") if $result->{stopped};
    write_file("$WORK/$name.result", "passed=$passed\nstatus=$result->{status}\nms=$ms\ntruncated=$truncated\n");
    return 0;
}

# ---- attribution: which tests a selector selected -----------------------------------------------

sub go_module_of {
    my ($dir) = @_;
    my $at = $dir;
    while (index($at, $APP) == 0) {
        if (-f "$at/go.mod" && !-l "$at/go.mod") {
            my $raw = read_file("$at/go.mod", 1 << 20) // '';
            return ($at, $1) if $raw =~ /^\s*module\s+"?([^\s"]+)"?/m;
            return;
        }
        last if $at eq $APP;
        $at = dirname($at);
    }
    return;
}

# go_run_matcher PATTERN: the tests a `-run PATTERN` selector selects in any package, as go test
# reads it: the pattern split at each `/` matches the test's name level by level (subtests are
# `Parent/sub`), each part unanchored; levels beyond the pattern's are the matched test's own.
# Not strict: Go's regular expressions are not Perl's in every corner.
sub go_run_matcher {
    my ($selector) = @_;
    return (undef, 0) if $selector eq '' || $selector =~ /^-/;
    my @parts;
    for my $part (split m{/}, $selector, -1) {
        my $re = eval { qr/$part/ };
        return (undef, 0) unless defined $re;
        push @parts, $re;
    }
    return (sub {
        my ($test) = @_;
        my (undef, $name) = split / /, $test->{id}, 2;
        return 0 unless defined $name;
        my @levels = split m{/}, $name;
        for my $i (0 .. ($#parts < $#levels ? $#parts : $#levels)) {
            return 0 unless $levels[$i] =~ $parts[$i];
        }
        return 1;
    }, 0);
}

# matcher TASK RUNNER SELECTOR: (sub TEST -> bool, strict). strict: the selector names a path
# that exists, so a run in which it matched no test is evidence that nothing of it ran.
sub matcher {
    my ($task, $runner, $selector) = @_;
    my $wd = workdir_abs($task);
    my $kind = selector_kind($runner);
    if ($kind eq 'package') {
        my $wild = $selector =~ s{/\.\.\.$}{}r;
        my $wildcard = $wild ne $selector || $selector eq '...';
        my $prefix;
        if ($selector =~ m{^\.} || $selector =~ m{^/}) {
            my $dir = normalize_abs($selector =~ m{^/} ? $wild : "$wd/" . ($wild eq '.' ? '' : $wild));
            $dir = $wd if $selector eq './...' || $selector eq '.';
            my ($root, $module) = go_module_of($dir);
            return (undef, 0) unless defined $module;
            my $rel = substr($dir, length $root);
            $rel =~ s{^/}{};
            $prefix = $rel eq '' ? $module : "$module/$rel";
        } elsif ($selector =~ m{^[A-Za-z0-9._~/-]+$} && $selector =~ m{[./]}
            && $selector !~ m{^(?:Test|Benchmark|Example|Fuzz)[^./]*(?:/|$)}) {
            $prefix = $wild;
        } else {
            return go_run_matcher($selector);
        }
        return (sub {
            my ($test) = @_;
            my $pkg = $test->{file} // return 0;
            return $pkg eq $prefix || ($wildcard && index($pkg, "$prefix/") == 0);
        }, 1);
    }
    return (undef, 0) if $kind eq 'name';
    my ($path, $rest) = ($selector, undef);
    if ($kind eq 'node-id' && $selector =~ /^(.*?)::(.+)$/) { ($path, $rest) = ($1, $2) }
    $path =~ s/:\d+(:\d+)?$// if $kind ne 'node-id';
    my $abs = normalize_abs($path =~ m{^/} ? $path : "$wd/$path");
    if (length $path && -e $abs) {
        return (sub {
            my ($test) = @_;
            my $file = $test->{file} // return 0;
            return 0 unless $file eq $abs || index($file, "$abs/") == 0;
            return 1 unless defined $rest;
            my (undef, $tail) = split /::/, $test->{id}, 2;
            # The file itself failed to collect: that error is each of its selectors'.
            return $test->{outcome} eq 'error' ? 1 : 0 unless defined $tail;
            return $tail eq $rest || index($tail, "${rest}::") == 0 || index($tail, "${rest}[") == 0;
        }, 1);
    }
    if ($kind eq 'module' && $selector =~ /^[A-Za-z_][A-Za-z0-9_.]*$/) {
        return (sub {
            my ($test) = @_;
            my $id = $test->{id};
            # A module that failed to import is unittest's _FailedTest, named after the last
            # component of the name it was loaded by (tests.test_text: _FailedTest.test_text).
            if ($id =~ s/^unittest\.loader\.(?:_FailedTest|ModuleImportFailure)\.//) {
                return 1 if $selector eq $id || substr($selector, -length($id) - 1) eq ".$id";
            }
            return $id eq $selector || index($id, "$selector.") == 0;
        }, 1);
    }
    if (($kind eq 'file-pattern' || $kind eq 'file') && length $path) {
        # A pattern over test file paths (jest's, vitest's, bun's), or a file that is not there.
        return (sub {
            my ($test) = @_;
            my $file = $test->{file} // return 0;
            return index($file, $path) >= 0;
        }, 0);
    }
    return (undef, 0);
}

# ---- judging one run ----------------------------------------------------------------------------

sub census {
    my $doc = read_json($CENSUS);
    return undef unless $doc && $doc->{sealed};
    return $doc;
}

# ---- canaries --------------------------------------------------------------------------------------
# Tests the reference solution must fail (tests/canaries.json, made by the compiler from the held-out
# tests, one expected value changed): written into the held-out files right after test.patch, so
# every run of the task's own command runs them among the held-out tests. Before the census they
# are recorded (the runner keeps those the oracle kills); once it is sealed, the ones it kept are
# written, and one that passes is tampering: whatever made it pass makes tests report "passed"
# without the code being right. A test is a canary's when its id matches the canary's idPattern.

# canaries_wanted: (the per-test canaries to write, the exit-code ones), by the census once it is
# sealed; none when the runner asks for none (SELFBENCH_CANARIES=off: its run without them).
sub canaries_wanted {
    return ([], []) if ($ENV{SELFBENCH_CANARIES} // '') eq 'off' || $CHECKS eq 'in-process';
    my $set = read_json($CANARIES) // return ([], []);
    my $sealed = census();
    my @tests = grep { ref($_) eq 'HASH' && defined $_->{key} } @{ $set->{canaries} // [] };
    my @exit = grep { ref($_) eq 'HASH' && defined $_->{key} } @{ $set->{exitCode} // [] };
    if ($sealed) {
        my $kept = $sealed->{canaries} // {};
        my %keys = map { $_ => 1 } @{ $kept->{keys} // [] };
        my %exits = map { $_ => 1 } @{ $kept->{exitCode} // [] };
        @tests = grep { $keys{ $_->{key} } } @tests;
        @exit = grep { $exits{ $_->{key} } } @exit;
    }
    return (\@tests, \@exit);
}

# canaries TASK: after test.patch, each canary's lines inserted into its held-out file (only into
# the file as the compiler saw it: its sha256); what was written, in the state directory (root's).
sub cmd_canaries {
    my ($task_path) = @_;
    my $set = read_json($CANARIES) // {};
    my ($tests, $exits) = canaries_wanted();
    my (%by_file, @applied, @unplaced);
    # A repository path under /app, never outside it (the bundle's own, but checked all the same).
    my $inside = sub { my ($file) = @_; defined $file && $file !~ m{^/} && $file !~ m{(?:^|/)\.\.(?:/|$)} };
    push @{ $by_file{ $_->{file} } }, $_ for grep { $inside->($_->{file}) } @$tests;
    for my $file (sort keys %by_file) {
        my $full = "$APP/$file";
        my $raw = read_file($full);
        my $want = ($set->{files} // {})->{$file} // '';
        if (!defined $raw || sha256_hex($raw) ne $want) {
            push @unplaced, map { $_->{key} } @{ $by_file{$file} };
            next;
        }
        my @lines = split /(?<=\n)/, $raw;
        # Bottom up; the canaries before one line go in their order (the group's random one:
        # never the order they were made in, which gave the test they copy away).
        for my $canary (sort { $b->{line} <=> $a->{line} || ($b->{order} // 0) <=> ($a->{order} // 0) || $b->{key} cmp $a->{key} } @{ $by_file{$file} }) {
            my $at = $canary->{line};
            $at = scalar @lines if $at > @lines;
            splice @lines, $at, 0, $canary->{text};
        }
        my @st = lstat $full;
        sysopen(my $fh, $full, O_WRONLY | O_TRUNC | O_NOFOLLOW) or do { push @unplaced, map { $_->{key} } @{ $by_file{$file} }; next };
        print {$fh} join('', @lines);
        close $fh;
        chmod $st[2] & 07777, $full if @st;
        push @applied, map { { key => $_->{key}, file => $_->{file}, name => $_->{name},
          idPattern => $_->{idPattern} } } @{ $by_file{$file} };
    }
    my @exit_ready;
    for my $canary (grep { $inside->($_->{file}) } @$exits) {
        my $raw = read_file("$APP/$canary->{file}");
        my $want = ($set->{files} // {})->{ $canary->{file} } // '';
        if (defined $raw && sha256_hex($raw) eq $want) { push @exit_ready, $canary->{key} }
        else { push @unplaced, $canary->{key} }
    }
    write_json($CANARY_STATE, { applied => \@applied, unplaced => \@unplaced, exitCode => \@exit_ready });
    chmod 0600, $CANARY_STATE;
    return 0;
}

# canary_matchers APPLIED: [key, the compiled idPattern, the canary's name] of each written canary.
sub canary_matchers {
    my ($applied) = @_;
    my @out;
    for my $canary (@{ $applied // [] }) {
        my $re = eval { qr/$canary->{idPattern}/ } or next;
        push @out, [ $canary->{key}, $re, $canary->{name} // '' ];
    }
    return \@out;
}

sub applied_canaries { return (read_json($CANARY_STATE) // {})->{applied} // [] }

# split_canaries RUN MATCHERS: each canary's tests moved out of the run's tests, by key (the
# held-out tests are judged without them; the canaries by their own rule).
sub split_canaries {
    my ($run, $matchers) = @_;
    $run->{canaries} = { map { $_->[0] => [] } @$matchers };
    return unless @$matchers;
    for my $key (sort keys %{ $run->{tests} }) {
        my $test = $run->{tests}{$key};
        for my $matcher (@$matchers) {
            next unless $test->{id} =~ $matcher->[1];
            push @{ $run->{canaries}{ $matcher->[0] } }, delete $run->{tests}{$key};
            last;
        }
    }
}

# is_canary_failure MATCHERS ID: whether a failed test a runner printed or reported is a canary's
# (the output of bun or cargo names a test without its file: its name at the end counts).
sub is_canary_failure {
    my ($matchers, $id) = @_;
    for my $matcher (@{ $matchers // [] }) {
        return 1 if $id =~ $matcher->[1];
        my $name = $matcher->[2];
        return 1 if length $name && $id =~ /(?:^|[\s>:.\/])\Q$name\E(?:\[.*\]|\/.*)?\s*$/;
    }
    return 0;
}

# canary_outcomes RUN: per canary, its tests' ids and its worst outcome ("missing": none ran).
sub canary_outcomes {
    my ($run) = @_;
    my @out;
    for my $key (sort keys %{ $run->{canaries} // {} }) {
        my @tests = @{ $run->{canaries}{$key} };
        my $worst;
        for my $test (@tests) {
            $worst = $test->{outcome} if !defined $worst || $RANK{ $test->{outcome} } > $RANK{$worst};
        }
        # A canary passes when any of its cases passed: each of them was changed to fail.
        $worst = 'passed' if grep { $_->{outcome} eq 'passed' || $_->{outcome} eq 'xpassed' } @tests;
        push @out, { key => $key, ids => [ sort map { $_->{id} } @tests ], outcome => $worst // 'missing' };
    }
    return \@out;
}

sub available_hooks {
    my $doc = read_json("$STATE/hooks.json") // {};
    return $doc->{runners} // [];
}

sub shorten {
    my ($list, $limit) = @_;
    $limit //= 5;
    my @shown = @$list[0 .. ($#$list < $limit - 1 ? $#$list : $limit - 1)];
    return join(', ', @shown) . (@$list > $limit ? ', ...' : '');
}

# planted FILES: the plugin and conftest files a runner loaded that the verifier cannot vouch for:
# under /app, not in the prepared tree as it stood when the run began (new, replaced or
# rewritten since); elsewhere, in a place the verifier user can write. The verifier's own hooks
# are never among them.
sub planted {
    my %seen;
    my @found;
    for my $file (@_) {
        next if $seen{$file}++;
        my $real = realpath($file) // $file;
        next if basename($real) =~ /^selfbench[-_]/ && out_of_reach($real);
        if (index($real, "$APP/") == 0) {
            push @found, $file unless unchanged_since_prepared($real);
        } elsif (!out_of_reach($real)) {
            push @found, $file;
        }
    }
    return @found;
}

# ---- a selector that names nothing ---------------------------------------------------------------
# A selector with a typo makes the runner select nothing: most runners then exit non-zero, which a
# fail-to-pass run at nop takes for a failing test. What each runner says when it selected nothing,
# and a path-like selector whose path does not exist, mark the selector (`matched: false`) so nop
# names it instead of passing. Only a run of that selector alone, or a message that names it, says
# which selector it was.

# selector_path RUNNER SELECTOR: the path a selector names, relative to the workdir, or undef when
# it names none (a pattern, a test name, a module, an import path).
sub selector_path {
    my ($runner, $selector) = @_;
    return undef if $selector =~ /^-/ || $selector eq '';
    my $kind = selector_kind($runner);
    if ($kind eq 'node-id') {
        my ($path) = split /::/, $selector, 2;
        return $path;
    }
    if ($kind eq 'package') {
        return undef unless $selector =~ m{^\.\.?(/|$)};
        (my $dir = $selector) =~ s{/?\.\.\.$}{};
        return length $dir ? $dir : '.';
    }
    return undef if $kind ne 'file' && $kind ne '';                  # patterns, names, modules
    return undef if $selector =~ /[*?\[{]/;                            # a glob
    (my $path = $selector) =~ s/:\d+(:\d+)?$//;
    return $path if basename($path) =~ /\.[A-Za-z0-9]+$/;             # a file name
    return undef;
}

# selector_kind RUNNER: how the runner reads a selector (the vocabulary's `selector`): node-id,
# module, package, file, file-pattern, name; '' for a runner the vocabulary does not know.
sub selector_kind { my ($runner) = @_; return ($RUNNERS{$runner // ''} // {})->{selector} // '' }

# What a runner prints when it selected nothing (the vocabulary's `nothing`): [pattern, named]. A
# named pattern's capture is what was not found (it counts for the selector it names, in any run);
# the others count only in a run of one selector.
my %NOTHING = map {
    my $runner = $_;
    ($runner => [ map { [qr/$_->{pattern}/, $_->{named} ? 1 : 0] } @{ $RUNNERS{$runner}{nothing} // [] } ])
} keys %RUNNERS;

# no_match TASK RUNNERS SELECTOR ALONE LOG RAN: why the selector selected nothing, or undef. ALONE:
# the run was this selector's alone (a "nothing" message that names no selector is then its own,
# unless RAN: some test of the run ran, so the message was one part's of it: `go test ./... -run X`
# says "no tests to run" for each package without X while another package runs it).
sub no_match {
    my ($task, $runners, $selector, $alone, $text, $ran) = @_;
    my $wd = workdir_abs($task);
    for my $runner (@$runners) {
        my $path = selector_path($runner, $selector);
        if (defined $path) {
            my $abs = normalize_abs($path =~ m{^/} ? $path : "$wd/$path");
            return "$runner: no such file or directory: $path" unless -e $abs;
        }
    }
    if (selector_kind($runners->[0]) eq 'module' && $selector =~ /^[A-Za-z_][\w.]*$/
        && $text =~ /No module named '\Q$selector\E'/) {
        return "$runners->[0]: no module named $selector";
    }
    for my $runner (@$runners) {
        for my $rule (@{ $NOTHING{$runner} // [] }) {
            my ($pattern, $named) = @$rule;
            next unless $named || ($alone && !$ran);
            while ($text =~ /$pattern/g) {
                my ($what, $at) = ($1, $-[0]);
                next if $named && !(index($what, $selector) >= 0 || index($selector, $what) >= 0);
                my $line = (split /\n/, substr($text, $at, 400))[0] // '';
                $line =~ s/\s+$//;
                return "$runner: " . substr($line, 0, 200);
            }
        }
    }
    return undef;
}

# ---- reading one run ---------------------------------------------------------------------------

# gather_run TASK EVENTS CONNS LOG STOPPED: what one test run left: the reporters' records (verified by
# the collector), the runner output's tests (bun, cargo), where the hack gate stopped it, and the
# plugins the verifier cannot vouch for.
sub gather_run {
    my ($task, $events, $conns, $log, $stopped) = @_;
    my $run = { tests => {}, seen => {}, finished => {}, plugins => [], tampered => [],
      duplicates => [], runnerStatus => {} };
    read_events($run, $events, $conns);
    output_reader($_)->($run, $task, $log) for output_runners(@{ $task->{expectedRunners} });
    my %go_packages = map { $_ => 1 } grep { length } split /\n/, read_file("$GO_OVERLAY/packages.txt") // '';
    # The test mode with the in-process checks off takes the output's word (go_cross_check is one).
    go_cross_check($run, \%go_packages) unless $CHECKS eq 'canaries';
    split_canaries($run, canary_matchers(applied_canaries()));
    $run->{planted} = [ planted(@{ $run->{plugins} }) ];
    $run->{stopped} = $stopped if $stopped;
    return $run;
}

# run_mode TASK RUN SEALED KIND: (mode, runners) by which the run is judged: the census's once it
# is sealed; before, the runners that reported, else those the command names that have a reporter
# in this image, else exit codes.
sub run_mode {
    my ($task, $run, $sealed, $kind) = @_;
    return ('none') if $kind eq 'p2p' && !@{ $task->{passToPass} };
    if ($sealed) {
        my $selection = $sealed->{ $kind =~ /^p2p/ ? 'passToPass' : 'failToPass' } // {};
        my $mode = $selection->{mode} // 'exit-code';
        my @runners = @{ $selection->{runners} // [] };
        return ('per-test', @runners) if $mode eq 'per-test' && @runners;
        return ('exit-code');
    }
    my @runners = sort keys %{ $run->{seen} };
    return ('per-test', @runners) if @runners;
    my %hooks = map { $_ => 1 } @{ available_hooks() };
    my @wanted = grep { $hooks{$_} } sort @{ $task->{expectedRunners} };
    return ('per-test', @wanted) if @wanted;
    return ('exit-code');
}

# attribute TASK RUN MODE RUNNERS SELECTORS ALONE LOGTEXT: per selector, the tests it selected
# (when they can be told apart) and whether it selected anything at all.
sub attribute {
    my ($task, $run, $mode, $runners, $selectors, $alone, $text) = @_;
    my @tests = values %{ $run->{tests} };
    my @named = @$runners ? @$runners : @{ $task->{expectedRunners} };
    my @attribution;
    for my $selector (@$selectors) {
        my ($match, $strict) = $mode eq 'per-test' ? matcher($task, $runners->[0] // '', $selector) : (undef, 0);
        my $entry = { selector => $selector, attributed => $match ? JSON::PP::true : JSON::PP::false };
        if ($match) {
            my @mine = sort { $a->{id} cmp $b->{id} } grep { $match->($_) } @tests;
            my %c = map { $_ => 0 } keys %RANK;
            $c{ $_->{outcome} }++ for @mine;
            $entry->{$_} = $c{$_} for keys %c;
            $entry->{ran} = scalar @mine;
            $entry->{tests} = [ map { $_->{id} } @mine ];
            $entry->{strict} = $strict ? JSON::PP::true : JSON::PP::false;
        }
        my $why = defined $text ? no_match($task, \@named, $selector, $alone, $text, scalar @tests) : undef;
        # The runner ran to its end, and ran this selector alone or other selectors' tests, and
        # none of its tests is this selector's.
        $why //= 'it selected no test' if defined $text && $match && $strict && !$entry->{ran} && !$run->{stopped}
          && $runners->[0] && $run->{finished}{ $runners->[0] } && ($alone || @tests);
        if (defined $why) {
            $entry->{matched} = JSON::PP::false;
            $entry->{why} = $why;
        }
        push @attribution, $entry;
    }
    return \@attribution;
}

# ---- judging one run (pure: `verifier.pl judge` runs it on a document) ----------------------------

# judge_run RUN CONTEXT: (problems, missing). CONTEXT: kind (f2p, p2p, f2p-alone:N, p2p-alone:N),
# exit (the command's status), mode and runners, attribution, sealed (the census or undef).
# Every rule that fails a run is here, each problem naming the rule and what it concerns.
sub judge_run {
    my ($run, $ctx) = @_;
    my ($kind, $exit, $mode, $sealed) = @$ctx{qw(kind exit mode sealed)};
    my %counted = map { $_ => 1 } @{ $ctx->{runners} };
    my @tests = sort { $a->{id} cmp $b->{id} } grep { $counted{ $_->{runner} } } values %{ $run->{tests} };
    my @failing = map { $_->{id} } grep { $_->{outcome} eq 'failed' || $_->{outcome} eq 'error' } @tests;
    my %by_id = map { $_->{id} => $_ } @tests;
    # The canaries' tests: failing is what each must do (the runner's exit and status then say a
    # test failed); passing, once the census is sealed, is tampering.
    my @canary_tests = grep { $counted{ $_->{runner} } } map { @$_ } values %{ $run->{canaries} // {} };
    my $canaries_failed = grep { $_->{outcome} eq 'failed' || $_->{outcome} eq 'error' } @canary_tests;
    my $canaries_passed = grep { $_->{outcome} eq 'passed' || $_->{outcome} eq 'xpassed' } @canary_tests;
    my ($base, $alone) = $kind =~ /^(f2p|p2p)(?:-alone:(\d+))?$/ or fail("unknown kind $kind");
    my $stopped = $run->{stopped} ? $run->{stopped}{id} : undef;
    my (@problems, @missing);
    push @problems, "stopped at its first failed test, $stopped (the reward is 0 already)"
      if defined $stopped;
    for my $entry (@{ $ctx->{attribution} // [] }) {
        next if !defined $entry->{matched} || $entry->{matched};
        my $which = $base eq 'p2p' ? 'pass-to-pass' : 'fail-to-pass';
        push @problems, "$which selector $entry->{selector} matched no test ($entry->{why})";
    }
    return (\@problems, \@missing) if $mode ne 'per-test';
    unshift @problems, $CANARY_RULE if $sealed && $canaries_passed && !defined $stopped;
    if ($sealed && $base eq 'f2p' && !defined $alone && !defined $stopped) {
        # Each canary written into this run (the census keeps those the oracle killed, in the
        # run the oracle ran) must have run and failed here too.
        my $silent = grep {
            my @mine = grep { $counted{ $_->{runner} } } @{ $run->{canaries}{$_} };
            !grep { $_->{outcome} ne 'skipped' } @mine;
        } keys %{ $run->{canaries} // {} };
        push @problems, $CANARY_SILENT_RULE if $silent;
    }
    my $in_process = ($ctx->{checks} // 'all') ne 'canaries';
    # Results forged beside the runner's, or rewritten while the tests ran: first, whatever else.
    unshift @problems, 'the runner\'s results were rewritten while the tests ran: '
      . shorten($run->{tampered}, 3) if $in_process && @{ $run->{tampered} // [] };
    push @problems, 'a test was reported twice with two outcomes (a forged record): '
      . shorten($run->{duplicates}, 3) if $in_process && @{ $run->{duplicates} // [] };
    push @problems, @{ $run->{channel_problems} // [] } if $in_process;
    push @problems, 'a test-runner plugin was loaded from a file that was not in the prepared '
      . 'tree or changed during the run: ' . shorten($run->{planted}) if $in_process && @{ $run->{planted} // [] };
    if (!@tests && !%{ $run->{seen} // {} }) {
        push @problems, 'no per-test results from ' . join(' or ', @{ $ctx->{runners} })
          . ': the suite did not run, or ended before it reported';
    } else {
        my @unfinished = grep { $FINISHING{$_} && !$run->{finished}{$_} } @{ $ctx->{runners} };
        for my $runner (@unfinished) {
            next if defined $stopped || !$in_process;
            my $abrupt = ($run->{abrupt} // {})->{$runner};
            push @problems, $abrupt
              ? "the ${runner} process ended without shutting down ($abrupt: os._exit, a signal or a crash)"
              : "$runner did not finish its run (it ended early)";
        }
        push @problems, scalar(@failing) . ' test(s) failed: ' . shorten(\@failing) if @failing;
        push @problems, "the runner exited $exit although no test failed"
          if $exit != 0 && !@failing && !$canaries_failed && !defined $stopped;
        push @problems, 'exit 0 but failures were reported' if $exit == 0 && (@failing || $canaries_failed);
        # The status each runner reported at its end must agree with its tests.
        for my $runner (sort keys %{ $run->{runnerStatus} // {} }) {
            next unless $counted{$runner} && !defined $stopped && $in_process;
            my $status = $run->{runnerStatus}{$runner};
            my $bad = grep { $_->{runner} eq $runner && ($_->{outcome} eq 'failed' || $_->{outcome} eq 'error') } @tests, @canary_tests;
            push @problems, "$runner ended with status $status although none of its tests failed"
              if $status ne '0' && !$bad;
            push @problems, "$runner ended with status 0 although $bad of its test(s) failed"
              if $status eq '0' && $bad;
        }
    }
    if ($sealed && !defined $alone) {
        my @required = $base eq 'p2p' ? @{ $sealed->{passToPass}{tests} // [] }
          : (@{ $sealed->{failToPass}{tests} // [] }, @{ $sealed->{failedAtNop} // [] });
        splice(@required, $MAX_TESTS) if @required > $MAX_TESTS;
        my (%done, @not_passed, @unasserted);
        my $asserted = $base eq 'p2p' ? {} : ($sealed->{failToPass}{asserts} // {});
        for my $id (@required) {
            next if $done{$id}++;
            my $test = $by_id{$id};
            if (!$test) { push @missing, $id; next }
            my $outcome = $test->{outcome};
            next if $outcome eq 'failed' || $outcome eq 'error';  # counted among the failures
            if ($outcome eq 'passed') {
                push @unasserted, $id
                  if ($asserted->{$id} // 0) > 0 && defined $test->{asserts} && !$test->{asserts};
                next;
            }
            next if $base eq 'p2p' && $P2P_OK{$outcome};
            push @not_passed, "$id ($outcome)";
        }
        push @problems, scalar(@missing) . ' expected test(s) did not run: ' . shorten(\@missing)
          if @missing && !defined $stopped;
        push @problems, scalar(@not_passed) . ' expected test(s) did not pass (only "passed" passes a '
          . 'fail-to-pass test): ' . shorten(\@not_passed) if @not_passed;
        push @problems, scalar(@unasserted) . ' expected test(s) passed without one assertion'
          . ' (they asserted at the oracle): ' . shorten(\@unasserted) if @unasserted && $in_process;
    } elsif ($base eq 'f2p' || defined $alone) {
        push @problems, 'no test passed' if !grep({ $_->{outcome} eq 'passed' } @tests) && !@problems;
        for my $entry (@{ $ctx->{attribution} // [] }) {
            next unless $entry->{attributed} && $entry->{strict};
            push @problems, "no test of selector $entry->{selector} passed"
              if !$entry->{passed} && !@failing;
        }
    }
    return (\@problems, \@missing);
}

# judge_and_write TASK NAME KIND EXIT LOG EVENTS CONNS STOPPED: the run judged, its evidence document
# written (/logs/verifier/evidence/NAME.json); returns 1 when it passed.
sub judge_and_write {
    my ($task, $name, $kind, $exit, $log, $events, $conns, $stopped) = @_;
    if ($kind eq 'canary') {
        # The exit-code canary run: the test command must fail on the changed expected value.
        my $sealed = census();
        my $canary = exit_code_canary() // {};
        my $killed = $exit != 0;
        my $doc = { name => $name, kind => $kind, exitCode => $exit + 0, mode => 'exit-code',
          runners => [], sealed => $sealed ? JSON::PP::true : JSON::PP::false,
          complete => JSON::PP::true, counts => {}, tests => [], selectors => [], missing => [],
          problems => ($sealed && !$killed ? [$CANARY_RULE] : []),
          canaries => [ { key => $canary->{key} // '', ids => [], outcome => $killed ? 'failed' : 'passed' } ],
          passed => (!$sealed || $killed) ? JSON::PP::true : JSON::PP::false, versions => {} };
        system('mkdir', '-p', '-m', '0700', "$LOGS/evidence");
        write_json("$LOGS/evidence/$name.json", $doc);
        return $doc->{passed} ? 1 : 0;
    }
    my $run = gather_run($task, $events, $conns, $log, $stopped);
    my $sealed = census();
    my ($mode, @runners) = run_mode($task, $run, $sealed, $kind);
    my ($base, $alone) = $kind =~ /^(f2p|p2p)(?:-alone:(\d+))?$/ or fail("unknown kind $kind");
    my $list = $base eq 'p2p' ? $task->{passToPass} : $task->{failToPass};
    my @selectors = defined $alone ? ($list->[$alone] // fail("no selector $alone")) : @$list;
    my $text = strip_ansi(read_file($log, 8 << 20) // '');
    # Once the census is sealed, the selectors were shown to select tests at nop and the oracle:
    # a run that selects nothing now is the census's "expected tests did not run".
    my $attribution = $mode eq 'none' ? [] : attribute($task, $run, $mode, \@runners, \@selectors,
      (defined $alone || @selectors == 1) ? 1 : 0, $sealed ? undef : $text);
    my $ctx = { kind => $kind, exit => $exit + 0, mode => $mode, runners => \@runners,
      attribution => $attribution, sealed => $sealed, checks => $CHECKS };
    my $doc = evidence_document($name, $run, $ctx);
    # Root's alone: a later run's tests must not read which tests an earlier one saw fail.
    system('mkdir', '-p', '-m', '0700', "$LOGS/evidence");
    write_json("$LOGS/evidence/$name.json", $doc);
    return $doc->{passed} ? 1 : 0;
}

# evidence_document NAME RUN CONTEXT: the run judged in its context (kind, exit, mode, runners,
# attribution, sealed), as the document evidence/NAME.json holds (pure: runner.model.evidence
# RunEvidence reads it; tests/golden/evidence-run.json keeps the two in agreement).
sub evidence_document {
    my ($name, $run, $ctx) = @_;
    my ($problems, $missing) = judge_run($run, $ctx);
    my ($mode, $exit, @runners) = ($ctx->{mode}, $ctx->{exit}, @{ $ctx->{runners} });
    my $canaries = canary_outcomes($run);
    # A run whose only failures are canaries' exits non-zero, as the runner must.
    my $canaries_failed = grep { $_->{outcome} eq 'failed' || $_->{outcome} eq 'error' } @$canaries;
    my $passed = !@$problems && ($mode eq 'none' || $exit == 0 || ($mode eq 'per-test' && $canaries_failed)) ? 1 : 0;
    my %counted = map { $_ => 1 } @runners;
    my @tests = sort { $a->{id} cmp $b->{id} } grep { $counted{ $_->{runner} } } values %{ $run->{tests} };
    my %count = map { $_ => 0 } keys %RANK;
    $count{ $_->{outcome} }++ for @tests;
    return {
        name => $name, kind => $ctx->{kind}, exitCode => $exit + 0, mode => $mode,
        runners => \@runners, sealed => $ctx->{sealed} ? JSON::PP::true : JSON::PP::false,
        complete => (!grep { $FINISHING{$_} && !$run->{finished}{$_} } @runners) ? JSON::PP::true : JSON::PP::false,
        counts => \%count, tests => [ map { { id => $_->{id}, outcome => $_->{outcome},
          (defined $_->{file} ? (file => $_->{file}) : ()),
          (defined $_->{asserts} ? (asserts => $_->{asserts}) : ()) } } @tests ],
        selectors => $ctx->{attribution}, missing => $missing, problems => $problems,
        passed => $passed ? JSON::PP::true : JSON::PP::false,
        versions => $run->{versions} // {},
        ($run->{stopped} ? (stopped => $run->{stopped}) : ()),
        canaries => $canaries,
    };
}

# collect TASK NAME KIND EXIT LOG: a run judged again from the records its collector kept.
sub cmd_collect {
    my ($task_path, $name, $kind, $exit, $log) = @_;
    my $task = task($task_path);
    my @events = grep { ref($_) eq 'HASH' } map { eval { $JSON->decode($_) } }
      split /\n/, read_file("$EVIDENCE_ROOT/$name/events.jsonl") // '';
    my $conns = read_json_any("$EVIDENCE_ROOT/$name/connections.json");
    my $passed = judge_and_write($task, $name, $kind, $exit, $log, \@events,
      ref($conns) eq 'ARRAY' ? $conns : [], undef);
    print "passed=$passed\n";
    return 0;
}

sub cmd_grade {
    my ($task_path) = @_;
    my $task = task($task_path);
    my %runs;
    for my $name (qw(fail_to_pass fail_to_pass_repeat pass_to_pass canary)) {
        my $doc = read_json("$LOGS/evidence/$name.json");
        $runs{$name} = $doc if $doc;
    }
    my ($mode, @runners) = ('exit-code');
    for my $doc (grep { defined } @runs{qw(fail_to_pass pass_to_pass)}) {
        next if $doc->{mode} eq 'none';
        $mode = $doc->{mode};
        @runners = @{ $doc->{runners} };
        last;
    }
    my @selectors;
    for my $pair (['fail_to_pass', 'failToPass'], ['pass_to_pass', 'passToPass']) {
        my ($run, $key) = @$pair;
        my $doc = $runs{$run} or next;
        for my $entry (@{ $doc->{selectors} }) {
            push @selectors, { kind => $key, %$entry };
            delete $selectors[-1]{tests};
        }
    }
    my $census = census();
    write_json("$LOGS/evidence.json", {
        schemaVersion => 1,
        mode => $mode,
        runners => \@runners,
        sealed => $census ? JSON::PP::true : JSON::PP::false,
        runs => { map { $_ => { passed => $runs{$_}{passed}, exitCode => $runs{$_}{exitCode},
          counts => $runs{$_}{counts}, problems => $runs{$_}{problems},
          complete => $runs{$_}{complete} } } sort keys %runs },
        selectors => \@selectors,
    });
    return 0;
}

# ---- build time ---------------------------------------------------------------------------------

my @SKIP_ROOTS = qw(/proc /sys /dev /run /tmp /var/tmp /var/cache /var/lib/apt /var/lib/dpkg /opt/selfbench-verifier);

sub find_site_dirs {
    my @found;
    my %skip = map { $_ => 1 } @SKIP_ROOTS;
    require File::Find;
    File::Find::find({ no_chdir => 1, wanted => sub {
        my $path = $File::Find::name;
        if ($skip{$path} || -l $path) { $File::Find::prune = 1; return }
        return unless -d _;
        my $name = basename($path);
        if ($name eq 'node_modules' || $name eq '.git') { $File::Find::prune = 1; return }
        if ($name eq 'site-packages' || $name eq 'dist-packages') {
            push @found, $path;
            $File::Find::prune = 1;
        }
    } }, '/');
    return sort @found;
}

sub interpreters_for {
    my ($site) = @_;
    my @candidates;
    if ($site =~ m{^(.*)/lib(?:64)?/python(\d+)(?:\.(\d+))?t?/(?:site|dist)-packages$}) {
        my ($prefix, $major, $minor) = ($1, $2, $3);
        my $version = defined $minor ? "$major.$minor" : $major;
        push @candidates, "$prefix/bin/python$version", "$prefix/bin/python$major", "$prefix/bin/python";
        push @candidates, "/usr/bin/python$version" if $prefix eq '/usr/local' || $prefix eq '/usr';
    }
    return grep { -x $_ && -f $_ } @candidates;
}

my $LIST_MODULES = <<'PY';
import os, pkgutil, sys
names = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
for entry in sys.path:
    if not entry or not os.path.isdir(entry):
        continue
    real = os.path.realpath(entry)
    inside = real == "/app" or real.startswith("/app/")
    if inside and "site-packages" not in real and "dist-packages" not in real:
        continue
    for info in pkgutil.iter_modules([entry]):
        names.add(info.name)
print("\n".join(sorted(n for n in names if n.isidentifier())))
PY

# run_capture_in DIR ENV PROGRAM ARGS...: (exit code, stdout) of a program run in DIR with ENV added.
sub run_capture_in {
    my ($dir, $env, @argv) = @_;
    my $pid = open(my $out, '-|') // return (127, '');
    if ($pid == 0) {
        open(STDIN, '<', '/dev/null');
        open(STDERR, '>', '/dev/null');
        chdir $dir or exit 127;
        @ENV{ keys %$env } = values %$env;
        exec(@argv) or exit 127;
    }
    local $/;
    my $data = <$out> // '';
    close $out;
    return ($? >> 8, $data);
}

sub run_capture { return run_capture_in('/', {}, @_) }

sub which {
    my ($name) = @_;
    for my $dir (split /:/, $ENV{PATH} // '') {
        next if $dir eq '' || $dir !~ m{^/} || index($dir, '/opt/selfbench-verifier') == 0;
        return "$dir/$name" if -x "$dir/$name" && -f "$dir/$name";
    }
    return undef;
}

# Compiles, into the pycache prefix it runs with, every module of its interpreter's standard
# library and site directories, as checked-hash .pyc files (validated against the source's bytes
# at each import, never its mtime: a source changed since loads as the source). ARGV[0] names a
# file of "tag<TAB>root" lines already compiled, which it extends (a virtualenv shares its base's
# standard library).
my $WARM_PYCACHE = <<'PY';
import compileall, py_compile, site, sys, sysconfig
if not getattr(sys, "pycache_prefix", None):  # before 3.8: it would write beside the sources
    sys.exit(0)
done_file = sys.argv[1]
try:
    with open(done_file) as f:
        done = set(f.read().splitlines())
except OSError:
    done = set()
paths = sysconfig.get_paths()
roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
try:
    roots.update(site.getsitepackages())
except Exception:
    pass
mode = py_compile.PycInvalidationMode.CHECKED_HASH
for root in sorted(roots):
    key = sys.implementation.cache_tag + "\t" + root
    if key in done:
        continue
    compileall.compile_dir(root, quiet=2, workers=0, invalidation_mode=mode)
    with open(done_file, "a") as f:
        f.write(key + "\n")
PY

# warm_pycache INTERPRETERS: the verifier's trusted bytecode cache ($PYCACHE), root's and
# read-only to the test runs, which import through it (PYTHONPYCACHEPREFIX): a fresh cache per
# run made every Python test run compile its interpreter's modules again (pytest: 1.3-1.5 s a run
# against 0.3 s warm, measured). A run cannot write there, so no run changes what a later one
# loads; a module whose source differs from what was compiled is compiled from its source.
sub warm_pycache {
    my (@pythons) = @_;
    my $done = "$STATE/pycache-roots.txt";
    unlink $done;
    system('mkdir', '-p', '-m', '0755', $PYCACHE) == 0 or fail("cannot create $PYCACHE");
    for my $python (@pythons) {
        # A failure leaves that interpreter's modules to be compiled at each run, as before.
        run_capture($python, '-I', '-X', "pycache_prefix=$PYCACHE", '-c', $WARM_PYCACHE, $done);
    }
    system('chown', '-R', 'root:root', $PYCACHE) == 0 or fail("cannot own $PYCACHE");
    system('chmod', '-R', 'u=rwX,go=rX', $PYCACHE) == 0 or fail("cannot lock $PYCACHE");
}

sub cmd_prepare_image {
    my ($task_path) = @_;
    my $task = task($task_path);
    system('mkdir', '-p', $STATE) == 0 or fail("cannot create $STATE");
    my (%shadowed, @sites, %packages, %pythons);
    # The evidence boot (hooks/python/) and each runner on Python's hook module
    # (hooks/RUNNER/MODULE.py, the vocabulary's runners.RUNNER.python), and their wiring.
    my @files = map { "$HOOKS/python/$_" } qw(selfbench_evidence_boot.py selfbench-evidence.pth);
    my @wiring;
    $shadowed{selfbench_evidence_boot} = 1;
    for my $runner (sort keys %RUNNERS) {
        my $python = $RUNNERS{$runner}{python} // next;
        push @files, "$HOOKS/$runner/$python->{module}.py";
        $shadowed{ $python->{module} } = 1;
        push @wiring, join("\t", 'start', $runner, @$_) for @{ $python->{starts} };
        push @wiring, join("\t", 'load', $runner, $python->{loads}, $python->{module}, $python->{joins} // '');
        for my $protect (@{ $python->{protects} }) {
            push @wiring, join("\t", 'protect', $runner, %$protect);
        }
    }
    write_file("$STATE/python-hooks.txt", join('', map { "$_\n" } @wiring));
    for my $site (find_site_dirs()) {
        next if index($site, '/opt/selfbench-verifier') == 0;
        for my $file (@files) {
            system('install', '-m', '0644', '-o', 'root', '-g', 'root', $file, $site) == 0
              or fail("cannot install the evidence hooks into $site");
        }
        push @sites, $site;
        for my $needs (map { $_->{available} // {} } values %RUNNERS) {
            my $package = $needs->{pythonPackage} // next;
            $packages{$package} = 1 if -d "$site/$package";
        }
        for my $python (interpreters_for($site)) {
            $pythons{$python} = 1;
            my ($code, $names) = run_capture($python, '-I', '-c', $LIST_MODULES);
            next if $code != 0;
            $shadowed{$_} = 1 for grep { /^[A-Za-z_][A-Za-z0-9_]*$/ } split /\n/, $names;
        }
    }
    warm_pycache(sort keys %pythons);
    write_file("$STATE/python-shadowed.txt", join('', map { "$_\n" } sort keys %shadowed));
    write_file("$STATE/python-sites.txt", join('', map { "$_\n" } @sites));
    # What each runner's recorder needs (the vocabulary's `available`): a program on PATH, a
    # Python site directory, or one holding a package.
    my @runners = grep {
        my $needs = $RUNNERS{$_}{available} // {};
        defined $needs->{program} ? which($needs->{program})
          : defined $needs->{pythonPackage} ? $packages{ $needs->{pythonPackage} }
          : $needs->{python} ? scalar @sites : 0;
    } sort keys %RUNNERS;
    # A wrapper for a program the image does not have would only change "not found" into a
    # program that exists and fails.
    for my $wrapper (glob("$HOOKS/*/bin/*")) {
        unlink $wrapper unless which(basename($wrapper));
    }
    write_json("$STATE/hooks.json", { runners => \@runners, sites => \@sites });
    $task->{goldSet} = {};
    lock_app_ownership($task);
    return 0;
}

# /app is the verifier's, except its git directory and the packages setup installed there
# (node_modules, virtualenvs, site-packages): root's, so no test run can change what a later
# one loads. Each node_modules keeps a cache directory the tests may write (vite, babel).
sub lock_app_ownership {
    my ($task) = @_;
    my (undef, undef, $uid, $gid) = getpwnam('verifier');
    fail('no verifier user') unless defined $uid;
    # The tracked harness (configuration, manifests, test files, the files the test command runs
    # and the selectors name) stays root's and read-only, in the image already.
    my %harness = map { ("$APP/$_" => 1) } (tracked_harness($task), @{ $task->{commandFiles} },
      @{ $task->{selectorFiles} });
    my %harness_dirs;
    for my $file (keys %harness) {
        my $dir = dirname($file);
        while (length($dir) > length($APP)) { $harness_dirs{$dir} = 1; $dir = dirname($dir) }
    }
    $harness_dirs{$APP} = 1 if %harness;
    my (@give, @installed);
    require File::Find;
    File::Find::find({ no_chdir => 1, wanted => sub {
        my $path = $File::Find::name;
        my $name = basename($path);
        if (!-l $path && -d _) {
            if ($path eq "$APP/.git") { $File::Find::prune = 1; return }
            if ($name eq 'node_modules' || $name eq 'site-packages' || $name eq 'dist-packages'
                || -f "$path/pyvenv.cfg") {
                push @installed, $path;
                $File::Find::prune = 1;
                return;
            }
        }
        return if $harness{$path} || $harness_dirs{$path};
        push @give, $path;
    } }, $APP);
    while (my @batch = splice(@give, 0, 2000)) {
        system('chown', '-h', "$uid:$gid", '--', @batch) == 0 or fail('chown failed');
    }
    for my $file (keys %harness) {
        protect_file($file) if -f $file && !-l $file;
    }
    protect_dir($_) for keys %harness_dirs;
    system('chmod', '-R', 'go-w', "$APP/.git");
    for my $tree (@installed) {
        next unless basename($tree) eq 'node_modules';
        for my $cache (qw(.cache .vite)) {
            my $dir = "$tree/$cache";
            next if -l $dir;
            mkdir $dir unless -d $dir;
            system('chown', '-R', "$uid:$gid", '--', $dir);
        }
    }
}

# ---- go test -json, for people ------------------------------------------------------------------

# channel_connect: a connection to this run's collector and its key (a process of the tests;
# undef outside a run, or when the collector does not answer).
sub channel_connect {
    my $address = $ENV{SELFBENCH_EVIDENCE_SOCKET} // return;
    $address =~ s/^@//;
    require IO::Socket::UNIX;
    my $sock = IO::Socket::UNIX->new(Type => Socket::SOCK_STREAM(), Peer => "\0$address") or return;
    my $key = <$sock>;
    return unless defined $key && $key =~ /^([0-9a-f]+)\n$/;
    return ($sock, pack('H*', $1));
}

sub channel_send {
    my ($sock, $key, $event) = @_;
    my $line = $JSON->encode($event);
    print {$sock} hmac_sha256_hex($line, $key), " $line\n";
}

# go-filter: `go test -json` on stdin (the go command's test2json events): each event to the
# collector as the go command's stream, its text to stdout for people. The stream is what the
# test binaries printed: the verifier's reporter inside each binary is what vouches for a test.
sub cmd_go_filter {
    my ($sock, $key) = channel_connect();
    $sock->autoflush(1) if $sock;
    STDOUT->autoflush(1);
    my $decoder = JSON::PP->new->utf8;
    while (my $line = <STDIN>) {
        if ($line =~ /^\{/) {
            my $event = eval { $decoder->decode($line) };
            if (ref($event) eq 'HASH') {
                channel_send($sock, $key, { runner => 'go-stream', event => $event }) if $sock;
                if (defined $event->{Output}) {
                    my $text = $event->{Output};
                    utf8::encode($text);
                    print $text;
                }
                next;
            }
        }
        print $line;
    }
    return 0;
}

# go-merge-overlay OWN OURS: a command's own -overlay file with the verifier's reporter files
# joined to it (the command's entries win), on stdout.
sub cmd_go_merge_overlay {
    my ($own, $ours) = @_;
    my $mine = read_json_any($own);
    my $theirs = read_json_any($ours);
    fail("cannot read $own") unless ref($mine) eq 'HASH';
    my %replace = (%{ (ref($theirs) eq 'HASH' ? $theirs->{Replace} : undef) // {} },
      %{ $mine->{Replace} // {} });
    print $JSON->encode({ %$mine, Replace => \%replace }), "\n";
    return 0;
}

# ---- pure entry points (the runner's unit tests drive them) -------------------------------------

# classify TASK SHADOWED: "STATUS<TAB>MODE<TAB>PATH" lines on stdin, one JSON verdict per line out
# (SHADOWED: a file of module names that resolve outside /app; `-` for the image's).
sub cmd_classify {
    my ($task_path, $shadow_file) = @_;
    my $task = task($task_path);
    $task->{goldSet} = { map { $_ => 1 } @{ $task->{goldFiles} } };
    if ($shadow_file ne '-') {
        my $raw = read_file($shadow_file) // fail("cannot read $shadow_file");
        $shadowed{$_} = 1 for grep { length } split /\n/, $raw;
        $shadowed{'(loaded)'} = 1;
    }
    while (my $line = <STDIN>) {
        chomp $line;
        my ($status, $mode, $path) = split /\t/, $line, 3;
        next unless defined $path;
        my ($verdict, $reason) = classify($task, $path, $status, $mode);
        print $JSON->encode({ path => $path, verdict => $verdict, reason => $reason }), "\n";
    }
    return 0;
}

# parse RUNNER FILE TASK: the tests a runner's output (bun, cargo) or go's -json events report.
sub cmd_parse {
    my ($runner, $file, $task_path) = @_;
    my $task = task($task_path);
    my $run = { tests => {}, seen => {}, finished => {}, plugins => [] };
    if (output_runners($runner)) { output_reader($runner)->($run, $task, $file) }
    elsif ($runner eq 'go') { read_go_events($run, [json_lines($file)]) }
    else { fail("parse takes a runner read from its output, or go") }
    my @tests = sort { $a->{id} cmp $b->{id} } values %{ $run->{tests} };
    print JSON::PP->new->utf8->canonical->pretty->encode({
        tests => [ map { { id => $_->{id}, outcome => $_->{outcome},
          (defined $_->{file} ? (file => $_->{file}) : ()) } } @tests ],
        finished => $run->{finished}{$runner} ? JSON::PP::true : JSON::PP::false,
    });
    return 0;
}

# judge FILE: judge_run on a document {run: {tests: [{runner, id, outcome, file, asserts}], seen,
# finished, runnerStatus, tampered, duplicates, planted, stopped}, context: {kind, exit, mode,
# runners, attribution, sealed}, name}; prints the run's evidence document (evidence_document).
sub cmd_judge {
    my ($file) = @_;
    my $doc = read_json($file) // fail("cannot read $file");
    my $in = $doc->{run} // {};
    my $run = { %$in, tests => {} };
    for my $test (@{ $in->{tests} // [] }) {
        $run->{tests}{"$test->{runner}\0$test->{id}"} = $test;
    }
    split_canaries($run, canary_matchers($doc->{canaries} // []));
    my $ctx = $doc->{context} // {};
    print $JSON->encode(evidence_document($doc->{name} // 'fail_to_pass', $run, $ctx)), "\n";
    return 0;
}

# sessions FILE: read_events and go_cross_check on a document {events: [...], conns: [{id, pid}],
# goPackages: [...]}; prints what they made of it (tests, sessions finished or ended abruptly,
# tampering, go's cross-check).
sub cmd_sessions {
    my ($file) = @_;
    my $doc = read_json($file) // fail("cannot read $file");
    my $run = { tests => {}, seen => {}, finished => {}, plugins => [], tampered => [],
      duplicates => [], runnerStatus => {} };
    read_events($run, $doc->{events} // [], $doc->{conns} // []);
    go_cross_check($run, { map { $_ => 1 } @{ $doc->{goPackages} // [] } });
    my @tests = map { { id => $_->{id}, runner => $_->{runner}, outcome => $_->{outcome} } }
      sort { $a->{id} cmp $b->{id} } values %{ $run->{tests} };
    print $JSON->encode({ tests => \@tests, finished => $run->{finished}, abrupt => $run->{abrupt} // {},
      tampered => $run->{tampered}, duplicates => $run->{duplicates},
      channelProblems => $run->{channel_problems} // [], runnerStatus => $run->{runnerStatus} }), "\n";
    return 0;
}

# no-match TASK RUNNER SELECTOR ALONE LOG RAN: why the selector selected nothing in that output,
# or nothing (the runners' messages; a path-like selector is looked for under /app). RAN: how many
# tests the run reported.
sub cmd_no_match {
    my ($task_path, $runner, $selector, $alone, $log, $ran) = @_;
    my $task = task($task_path);
    my $text = strip_ansi(read_file($log) // '');
    my $why = no_match($task, [$runner], $selector, $alone ? 1 : 0, $text, $ran);
    print $JSON->encode({ why => $why }), "\n";
    return 0;
}

# selects TASK RUNNER SELECTOR FILE: the tests of FILE (a JSON list of {id, outcome, file}) the
# selector selected, and whether that answer is strict (the selector names what exists).
sub cmd_selects {
    my ($task_path, $runner, $selector, $file) = @_;
    my $task = task($task_path);
    my $tests = read_json_any($file) // fail("cannot read $file");
    my ($match, $strict) = matcher($task, $runner, $selector);
    my @ids = $match ? map { $_->{id} } grep { $match->($_) } @$tests : ();
    print $JSON->encode({ attributed => $match ? JSON::PP::true : JSON::PP::false, tests => \@ids,
      strict => $strict ? JSON::PP::true : JSON::PP::false }), "\n";
    return 0;
}

# ---- main ---------------------------------------------------------------------------------------

my %COMMANDS = (
    'prepare-image' => [\&cmd_prepare_image, 1],
    'apply-policy' => [\&cmd_apply_policy, 1],
    'lockdown' => [\&cmd_lockdown, 1],
    'canaries' => [\&cmd_canaries, 1],
    'canaries-lockdown' => [\&cmd_canaries_lockdown, 1],
    'canary-ready' => [\&cmd_canary_ready, 1],
    'canary-sealed' => [\&cmd_canary_sealed, 1],
    'reset' => [\&cmd_reset, 1],
    'reset-run' => [\&cmd_reset_run, 1],
    'collect' => [\&cmd_collect, 5],
    'judge' => [\&cmd_judge, 1],
    'sessions' => [\&cmd_sessions, 1],
    'no-match' => [\&cmd_no_match, 6],
    'selects' => [\&cmd_selects, 4],
    'grade' => [\&cmd_grade, 1],
    'go-filter' => [\&cmd_go_filter, 0],
    'go-merge-overlay' => [\&cmd_go_merge_overlay, 2],
    'run' => [\&cmd_run, 1],
    'policy-check' => [\&cmd_policy_check, 3],
    'classify' => [\&cmd_classify, 2],
    'parse' => [\&cmd_parse, 3],
);

my $command = shift @ARGV // '';
my $entry = $COMMANDS{$command} or fail("usage: verifier.pl COMMAND ARGS (one of "
  . join(', ', sort keys %COMMANDS) . ')');
fail("$command takes $entry->[1] argument(s)") if @ARGV != $entry->[1];
umask 022;
exit($entry->[0]->(@ARGV) // 0);
