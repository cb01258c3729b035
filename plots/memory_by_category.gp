# (a) Memory by category per configuration, stacked. Each category is drawn at its own peak over
# the timed steps (the CSV's *_bytes columns), so a stack can exceed the peak allocated, which is
# marked as a black dot: the gap is memory that was never live at the same moment.
load scriptdir."/common.gp"
if (!exists("n_mem")) n_mem = 1
f = data("memory_by_category.dat")
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("memory_by_category", fmt)
    set title "Device memory by category per configuration (each category at its own peak)"
    if (n_mem == 0) {
        eval(empty_panel("no trained rows (status ok or fallback) in this CSV"))
    } else {
        set style data histograms
        set style histogram rowstacked
        set boxwidth 0.7
        set ylabel "GiB"
        set yrange [0:*]
        set xtics rotate by -30 left noenhanced
        set key outside right top vertical
        set bmargin 9
        plot f using 2:xtic(1) title "parameters" lc rgb c_param, \
             '' using 3 title "gradients" lc rgb c_grad, \
             '' using 4 title "optimizer (Adam m, v)" lc rgb c_optim, \
             '' using 5 title "master weights" lc rgb c_master, \
             '' using 6 title "activations" lc rgb c_act, \
             '' using 7 title "workspace" lc rgb c_ws, \
             '' using 0:8 with points pt 7 ps 1.4 lc rgb "black" title "peak allocated"
    }
    set output
}
