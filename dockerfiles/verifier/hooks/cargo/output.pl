# The verifier's reader of cargo test's output (loaded by verifier.pl, `output_reader`): cargo
# reports its tests only there. Returns a sub (RUN, TASK, LOG); it runs in the helper's package
# and calls its helpers (read_file, strip_ansi, add_test, ...).
use strict;
use warnings;

# cargo test: "test path::name ... ok|FAILED|ignored" per test under "Running <target> (...)"
# or "Doc-tests <crate>", and one "test result:" line per test binary.
sub {
    my ($run, $task, $log) = @_;
    my $raw = read_file($log) // return;
    my ($target, $open) = ('', 0);
    my $results = 0;
    for my $line (split /\n/, strip_ansi($raw)) {
        if ($line =~ /^\s*Running (?:unittests )?(\S+)(?: \(([^)]+)\))?\s*$/) {
            $target = $2 // $1;
            $target =~ s{^.*/}{};
            $target =~ s/-[0-9a-f]{16}(\.exe)?$//;
            next;
        }
        if ($line =~ /^\s*Doc-tests (\S+)/) { $target = "doc:$1"; next }
        if ($line =~ /^running \d+ tests?$/) { $open++; $run->{seen}{cargo} = 1; next }
        if ($line =~ /^test (.+?) \.\.\. (ok|FAILED|ignored|ignored, .*)$/) {
            my $outcome = $2 eq 'ok' ? 'passed' : $2 eq 'FAILED' ? 'failed' : 'skipped';
            $run->{seen}{cargo} = 1;
            add_test($run, 'cargo', "$target $1", $target, $outcome);
        } elsif ($line =~ /^test result: /) {
            $results++;
        }
    }
    $run->{finished}{cargo} = 1 if $open && $results >= $open;
};
