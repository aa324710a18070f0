# Plots of mnemo-eval results (written by mnemo-eval; rerun by hand with
#   gnuplot -e "dir='docs/results'" scripts/plot_eval.gp
# Reads DIR/eval_memory.dat ("label" bpb) and DIR/eval_exit.dat ("label" avg_layers bpb);
# writes DIR/eval_memory.png (bar per memory mode) and DIR/eval_exit.png (layers vs bpb).
if (!exists("dir")) dir = "docs/results"

mem = dir . "/eval_memory.dat"
ext = dir . "/eval_exit.dat"
has_rows(f) = system(sprintf("grep -qv '^#' '%s' 2>/dev/null && echo 1 || echo 0", f)) + 0

set terminal pngcairo size 900,520 enhanced font "DejaVu Sans,11"
set grid ytics lc rgb "#dddddd"
set border 3
set tics nomirror

if (has_rows(mem)) {
  set output dir . "/eval_memory.png"
  set title "Held-out bits per byte by memory mode (lower is better)"
  set ylabel "bits per byte"
  set style fill solid 0.8 border -1
  set boxwidth 0.6
  stats mem using 2 nooutput
  set yrange [0:STATS_max * 1.15]
  set xtics rotate by -20 left
  set rmargin 12
  set offsets 0.5, 0.5, 0, 0
  plot mem using 0:2:xtic(1) with boxes lc rgb "#4472c4" notitle, \
       mem using 0:2:(sprintf("%.3f", $2)) with labels offset 0,0.8 notitle
  unset output
  unset xtics
  set xtics nomirror
  set offsets 0, 0, 0, 0
}

if (has_rows(ext)) {
  set output dir . "/eval_exit.png"
  set title "Early exit: average layers used vs bits per byte"
  set xlabel "average layers per byte"
  set ylabel "bits per byte"
  set autoscale
  set xrange [0:*]
  set offsets 0, graph 0.05, graph 0.1, graph 0.1
  plot ext using 2:3 with linespoints lw 2 pt 7 lc rgb "#c0504d" notitle, \
       ext using 2:3:1 with labels offset 0,1 notitle
  unset output
}
