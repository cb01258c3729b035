# (b) Peak memory against throughput, one numbered point per configuration (the list on the right says
# which is which; points that coincide share a label). The Pareto frontier joins the configurations
# no other beats on both: less (or equal) memory and more (or equal) items/s (tokens for GPT, samples for the MLP).
load scriptdir."/common.gp"
if (!exists("n_tp")) n_tp = 1
if (!exists("subtitle")) subtitle = ""
f = data("peak_vs_throughput.dat")
pf = data("pareto.dat")
listfont = n_tp > 30 ? ",8" : ",9"
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("peak_vs_throughput", fmt)
    if (n_tp == 0) {
        set title "Peak memory against throughput\n".subtitle
        eval(empty_panel("no timed rows in this CSV: dry-backend rows have no times (they need a GPU, or the cpu backend)"))
    } else {
        set multiplot title "Peak memory against throughput (up and to the left is better)\n".subtitle
        set origin 0, 0
        set size 0.66, 0.94
        set xlabel "peak allocated memory (GiB)"
        set ylabel "throughput (".(exists("items") ? items : "tokens")."/s)"
        set xrange [0:*]
        set yrange [0:*]
        # below the axes (horizontal): inside them it covered a point wherever it stood
        set key below horizontal
        set bmargin 5
        plot pf using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.6 lc rgb "#d62728" title "Pareto frontier", \
             f using 2:3 with points pt 7 ps 1.3 lc rgb "#1f77b4" title "configuration", \
             f using 2:3:6 with labels left offset 0.9,0 font ",9" noenhanced notitle
        reset; eval(style)
        set origin 0.64, 0
        set size 0.36, 0.94
        unset border; unset tics; unset grid; unset key
        set xrange [0:1]
        set yrange [n_tp + 0.5:0]
        set lmargin 0; set rmargin 1
        set bmargin 5 # as the plot beside it: the list ends above its tic labels
        plot f using (0):5:(sprintf("%2d  %s%s", $5, strcol(1), $4 > 0 ? "  (frontier)" : "")) with labels left font listfont noenhanced
        unset multiplot
    }
    set output
}
