# Plots of a mnemo-bench run (run by mnemo-bench --plot PNG; by hand:
#   gnuplot -e "dir='DATA'; out='bench.png'; mode='level'; title='...'" scripts/plot_bench.gp
# mode='level' reads DIR/ttft.dat and DIR/itl.dat (ms, cumulative fraction), DIR/timeline.dat
# (bucket middle in seconds, output tokens/s, bucket width) and DIR/exit.dat (layer, tokens): latency CDFs, throughput over
# time and the exit-layer histogram side by side.
# mode='sweep' reads DIR/sweep.dat (streams, tokens/s, linear scaling from the first row,
# TTFT p50/p99 ms, ITL p50/p99 ms): throughput and latency against concurrent streams.
if (!exists("dir")) dir = "."
if (!exists("out")) out = "bench.png"
if (!exists("mode")) mode = "level"
if (!exists("title")) title = "mnemo-bench"

has_rows(f) = system(sprintf("grep -qv '^#' '%s' 2>/dev/null && echo 1 || echo 0", f)) + 0

# pngcairo draws nicer lines; the plain libgd png terminal is the fallback.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1500,500 noenhanced font "DejaVu Sans,10"
} else {
  set terminal png size 1500,500 noenhanced font "DejaVu Sans,10"
}
set output out
set grid lc rgb "#dddddd"
set border 3
set tics nomirror
set key top left

if (mode eq "sweep") {
  data = dir . "/sweep.dat"
  set multiplot layout 1,2 title title
  set title "Aggregate output throughput"
  set xlabel "concurrent streams"
  set ylabel "output tokens/s"
  set logscale x 2
  set offsets graph 0.05, graph 0.08, graph 0.12, 0
  set yrange [0:*]
  plot data using 1:2 with linespoints lw 2 pt 7 lc rgb "#4472c4" title "measured", \
       data using 1:3 with lines dt 2 lw 1.5 lc rgb "#888888" title "linear scaling", \
       data using 1:2:(sprintf("%.0f", $2)) with labels offset 0,1 notitle
  set title "Latency (ms)"
  set ylabel "ms"
  set logscale y
  set autoscale y
  plot data using 1:4 with linespoints lw 2 pt 7 lc rgb "#c0504d" title "TTFT p50", \
       data using 1:5 with linespoints lw 1 pt 6 dt 2 lc rgb "#c0504d" title "TTFT p99", \
       data using 1:6 with linespoints lw 2 pt 5 lc rgb "#4472c4" title "ITL p50", \
       data using 1:7 with linespoints lw 1 pt 4 dt 2 lc rgb "#4472c4" title "ITL p99"
  unset multiplot
} else {
  ttft = dir . "/ttft.dat"
  itl = dir . "/itl.dat"
  timeline = dir . "/timeline.dat"
  exits = dir . "/exit.dat"
  set multiplot layout 1,3 title title

  set title "Latency CDF"
  set key bottom right
  set xlabel "ms (log scale)"
  set ylabel "fraction of samples"
  set logscale x
  set yrange [0:1.02]
  if (has_rows(ttft) && has_rows(itl)) {
    plot ttft using 1:2 with steps lw 2 lc rgb "#c0504d" title "TTFT", \
         itl using 1:2 with steps lw 2 lc rgb "#4472c4" title "inter-token"
  } else {
    if (has_rows(ttft)) {
      plot ttft using 1:2 with steps lw 2 lc rgb "#c0504d" title "TTFT"
    } else {
      set label 1 "no successful requests" at graph 0.5, 0.5 center
      plot 1/0 notitle
      unset label 1
    }
  }
  unset logscale x

  set title "Output tokens/s over the measured window"
  set key top left
  set xlabel "seconds"
  set ylabel "tokens/s"
  set yrange [0:*]
  set xrange [0:*]
  if (has_rows(timeline)) {
    set style fill solid 0.5 border lc rgb "#4472c4"
    plot timeline using 1:2:3 with boxes lc rgb "#4472c4" notitle
  } else {
    set label 1 "no tokens" at graph 0.5, 0.5 center
    plot 1/0 notitle
    unset label 1
  }

  set title "Exit layer of each token"
  set xlabel "layer"
  set ylabel "tokens"
  set autoscale x
  set style fill solid 0.8 border -1
  set boxwidth 0.6
  set xtics 1
  if (has_rows(exits)) {
    stats exits using 1 nooutput
    set xrange [0.3:STATS_max + 0.7]
    plot exits using 1:2 with boxes lc rgb "#9bbb59" notitle
  } else {
    set label 1 "not reported" at graph 0.5, 0.5 center
    plot 1/0 notitle
    unset label 1
  }
  unset multiplot
}
unset output
