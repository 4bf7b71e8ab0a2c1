# The verifier's reader of bun test's output (loaded by verifier.pl, `output_reader`): bun
# reports its tests only there. Returns a sub (RUN, TASK, LOG); it runs in the helper's package
# and calls its helpers (read_file, strip_ansi, add_test, ...).
use strict;
use warnings;

# bun test prints one line per test: "(pass) suite > name [0.1ms]" (off a terminal), under a
# "path/to/file.test.ts:" header per file, and a summary ("Ran N tests across M files").
sub {
    my ($run, $task, $log) = @_;
    my $raw = read_file($log) // return;
    my $file;
    my $wd = workdir_abs($task);
    for my $line (split /\n/, strip_ansi($raw)) {
        if ($line =~ /^(\S.*\.(?:test|spec|_test|_spec)\.[A-Za-z]+|\S.*\.[cm]?[jt]sx?):$/) {
            $file = normalize_abs("$wd/$1");
            next;
        }
        if ($line =~ /^# Unhandled error (?:between tests|in \S+)/) {
            # The file (or the run) failed outside any test: an error of the file, as jest's and
            # vitest's reporters record one.
            $run->{seen}{bun} = 1;
            add_test($run, 'bun', (defined $file ? "$file > " : '') . '[unhandled error]', $file, 'error');
            next;
        }
        if ($line =~ /^\s*\((pass|fail|skip|todo)\)\s+(.+?)(?:\s+\[[0-9.]+m?s\])?\s*$/) {
            my %map = (pass => 'passed', fail => 'failed', skip => 'skipped', todo => 'skipped');
            $run->{seen}{bun} = 1;
            add_test($run, 'bun', (defined $file ? "$file > " : '') . $2, $file, $map{$1});
        } elsif ($line =~ /^\s*Ran \d+ tests? across \d+ files?/) {
            $run->{seen}{bun} = 1;
            $run->{finished}{bun} = 1;
        }
    }
};
