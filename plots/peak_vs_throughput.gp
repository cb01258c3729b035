# (b) Peak memory against throughput, one point per configuration. The Pareto frontier joins the
# configurations no other beats on both: less (or equal) memory and more (or equal) tokens/s.
load scriptdir."/common.gp"
if (!exists("n_tp")) n_tp = 1
f = data("peak_vs_throughput.dat")
pf = data("pareto.dat")
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("peak_vs_throughput", fmt)
    set title "Peak memory against throughput (up and to the left is better)"
    if (n_tp == 0) {
        eval(empty_panel("no timed rows in this CSV: dry-backend rows have no times (they need a GPU, or the cpu backend)"))
    } else {
        set xlabel "peak allocated memory (GiB)"
        set ylabel "throughput (tokens/s)"
        set xrange [0:*]
        set yrange [0:*]
        set key below
        plot pf using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.6 lc rgb "#d62728" title "Pareto frontier", \
             f using 2:3 with points pt 7 ps 1.5 lc rgb "#1f77b4" title "configuration", \
             f using 2:3:1 with labels left offset 1,0.6 font ",8" noenhanced notitle
    }
    set output
}
